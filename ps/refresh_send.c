/* ps/refresh_send.c — Params for kfac-statsd under [kfac] refresh =
 * adaptive (see ps/refresh.h and ps_refresh_send_statsd in server_int.h).
 * Not cached like the workers' Params: the wanted layers change within a
 * version as the statsd's own statistics are recorded. */
#include "ps/server_int.h"
#include "ps/refresh_send.h"
#include "ps/member.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/log.h"

int ps_refresh_send_statsd(ps_server_t *s, ps_peer_t *p) {
    msg_t m;
    msg_init(&m, MSG_PARAMS, MSG_ROLE_PS, 0);
    int n = ps_refresh_wanted(ps_sched_refresh(s->sched), ps_round_version(s->round), &m.params.stats_layers);
    if (n == 0) {
        /* Every factor is fresh enough: nothing to compute until a step
         * makes one due (s_step_publish answers every request waiting for
         * the new version). */
        ps_member_wait_params(p, (uint64_t)ps_round_version(s->round) + 1);
        ps_refresh_held(ps_sched_refresh(s->sched));
        return 0;
    }
    m.params.n_stats_layers = (size_t)n;
    m.params.version = (uint64_t)ps_round_version(s->round);
    m.params.params = s->model.net->params;
    m.params.n_params = s->model.net->n_params;
    m.params.state = s->model.net->n_state ? s->model.net->state : NULL;
    m.params.n_state = s->model.net->n_state;
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = msg_encode(&m, &buf, &len);
    if (rc < 0) {
        log_error("encoding Params failed: %s", strerror(-rc));
        return rc;
    }
    rc = zloop_send_take(s->sock, &p->route, &buf, len);
    free(buf);
    ps_member_answered(p);
    if (rc == 0) ps_member_sent_params(p, (uint64_t)ps_round_version(s->round), 1);
    if (rc < 0) log_debug("Params %ld not delivered to statsd#%u: %s", ps_round_version(s->round), p->id, strerror(-rc));
    return rc;
}
