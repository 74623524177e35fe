/* ps/greet.c — see admit.h. */
#include "ps/greet.h"

#include <stdio.h>
#include <string.h>

#include "common/base/log.h"
#include "common/base/version.h"

int ps_greet_build_compatible(const char *client_build, char *why, size_t why_len) {
    /* Compare the first two words: "kfac" and the release. */
    char a[2][64] = {{0}}, b[2][64] = {{0}};
    int na = client_build ? sscanf(client_build, "%63s %63s", a[0], a[1]) : 0;
    int nb = sscanf(KFAC_BUILD_ID, "%63s %63s", b[0], b[1]);
    if (na == 2 && nb == 2 && strcmp(a[0], b[0]) == 0 && strcmp(a[1], b[1]) == 0) return 1;
    char build[104];
    log_escape(client_build && client_build[0] ? client_build : "(none)", build, sizeof build); /* it is logged */
    snprintf(why, why_len, "build '%s' does not match this kfac-ps's '%s'; run the same kfac release everywhere",
             build, KFAC_BUILD_ID);
    return 0;
}

ps_greet_t ps_greet_hello(const msg_t *m, const msg_limits_t *limits, int running, char *err, size_t err_len) {
    if (err_len) err[0] = '\0';
    if (m->protocol_version != KFAC_PROTOCOL_VERSION) {
        msg_version_refusal(err, err_len, m->protocol_version, m->role);
        return PS_GREET_REFUSE_VERSION;
    }
    if (msg_validate(m, limits, err, err_len) < 0) return PS_GREET_INVALID;
    if (!ps_greet_build_compatible(m->hello.build_id, err, err_len)) return PS_GREET_REFUSE_BUILD;
    if (!running) return PS_GREET_RUN_OVER;
    return PS_GREET_GO;
}

int ps_greet_role_cap(msg_role_t role, int workers, int statsd, int max_peers) {
    switch (role) {
    case MSG_ROLE_WORKER: return 2 * workers > workers + 16 ? 2 * workers : workers + 16;
    case MSG_ROLE_STATSD: return 2 * statsd > statsd + 16 ? 2 * statsd : statsd + 16;
    case MSG_ROLE_INVERTD: return max_peers / 2;
    default: return 16;
    }
}

ps_greet_rank_t ps_greet_rank(const ps_peers_t *peers, const ps_peer_t *p, int workers, int statsd) {
    ps_greet_rank_t out = {0, 0, 0};
    if (p->role == MSG_ROLE_WORKER) out.n_ranks = workers;
    else if (p->role == MSG_ROLE_STATSD) out.n_ranks = statsd > 0 ? statsd : 1;
    int n = out.n_ranks;
    if (n <= 0) return out;
    if (p->asked_id < (uint32_t)n && !ps_peers_rank_taken(peers, p->role, (int)p->asked_id, p)) {
        out.rank = (int)p->asked_id;
        return out;
    }
    for (int r = 0; r < n; r++)
        if (!ps_peers_rank_taken(peers, p->role, r, p)) {
            out.rank = r;
            return out;
        }
    out.rank = (int)((p->id - 1) % (uint32_t)n);
    out.shared = 1;
    return out;
}
