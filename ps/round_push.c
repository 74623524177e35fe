/* ps/round_push.c — a worker's gradient push into the round of version t:
 * the verdict on its version (ps/member.h), what one member may put in (a
 * batch of examples, a norm near the recent ones, batch-norm variances >=
 * 0), per-layer clipping against each layer's own history ([ps]
 * grad_clip_ratio), and holding it for the step (ps/round.c). */
#include "ps/server_int.h"
#include "ps/round.h"
#include "ps/round_int.h"
#include "ps/guard.h"
#include "ps/io.h"
#include "ps/member.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/kfac/kfac_step.h"
#include "common/base/clock.h"
#include "common/base/log.h"
#include "common/base/ratelimit.h"

/* ||D^T X||_F^2 of a factored layer of a push, by Gram products. */
static double s_msg_lowrank_norm2(const net_t *net, const msg_lowrank_t *f) {
    const layer_t *l = &net->layers[f->layer];
    const int out = l->out, in = l->in_c * l->in_h * l->in_w, n = (int)f->n_rows;
    return kfac_lowrank_inner(f->d, out, f->x, in, n, f->d, out, f->x, in, n, out, in);
}

/* The squared norm of push g's gradient, layer by layer into n2 (a factored
 * layer's weights as ||D^T X||^2), and their sum: one pass over the message.
 * The arena is each layer's weights then its bias, in layer order
 * (common/nn/nn.h), and g->grad is that less the factored layers' weights
 * (msg_validate checked the lengths and the order). */
static double s_push_norm2(const net_t *net, const msg_grad_push_t *g, double *n2) {
    size_t at = 0, k = 0;
    double total = 0.0;
    for (int li = 0; li < net->n_layers; li++) {
        const layer_t *l = &net->layers[li];
        double x;
        if (k < g->n_lowrank && (int)g->lowrank[k].layer == li) {
            x = s_msg_lowrank_norm2(net, &g->lowrank[k++]);
        } else {
            x = kfac_step_norm2(g->grad + at, l->n_w);
            at += l->n_w;
        }
        x += kfac_step_norm2(g->grad + at, l->n_b);
        at += l->n_b;
        n2[li] = x;
        total += x;
    }
    return total;
}

/* Does the step use factored gradients as they come? With K-FAC and the
 * weighted mean, yes (kfac_opt_step_lowrank decides per layer); SGD and
 * the robust rules see dense gradients, densified here at the push. */
static int s_keep_lowrank(const ps_server_t *s) {
    return s->model.kfac && s->cfg->aggregate == RUNCFG_AGGREGATE_MEAN;
}

/* The push's gradient into p: grad (with the factored layers' weights left
 * out, proto/kfac.proto) spread over the arena, and each factored layer
 * either kept in p->lowrank (zeros in p->grad's weight slice) or densified
 * into it. Returns 0 or -ENOMEM. */
static int s_hold_grad(ps_server_t *s, ps_peer_t *p, msg_grad_push_t *g) {
    const net_t *net = s->model.net;
    if (p->lowrank.v) kfac_lowrank_set_clear(&p->lowrank);
    if (g->n_lowrank == 0) {
        /* a dense gradient is held as it was decoded: the message's array
         * and the peer's last one change hands (no copy; the message frees
         * the old one) */
        float *old = p->grad;
        p->grad = g->grad;
        g->grad = old;
        return 0;
    }
    const int keep = s_keep_lowrank(s);
    if (keep && !p->lowrank.v && kfac_lowrank_set_init(&p->lowrank, net) < 0) return -ENOMEM;
    size_t at = 0, from = 0;
    for (size_t i = 0; i < g->n_lowrank; i++) {
        const msg_lowrank_t *f = &g->lowrank[i];
        const layer_t *l = &net->layers[f->layer];
        if (l->w_off > from) memcpy(p->grad + from, g->grad + at, (l->w_off - from) * sizeof(float));
        at += l->w_off - from;
        from = l->w_off + l->n_w;
        kfac_lowrank_t view = {.layer = (int)f->layer, .n_out = l->out, .n_in = l->in_c * l->in_h * l->in_w,
                               .w_off = l->w_off, .n_rows = (int)f->n_rows, .D = f->d, .X = f->x};
        kfac_lowrank_t *e = keep ? kfac_lowrank_set_find(&p->lowrank, (int)f->layer) : NULL;
        if (e && kfac_lowrank_append(e, f->d, f->x, (int)f->n_rows, 1.0f) == 0) {
            memset(p->grad + l->w_off, 0, l->n_w * sizeof(float));
        } else {
            if (e) e->n_rows = 0;
            /* p->grad's weight slice (out, in) = D^T X */
            kfac_lowrank_densify(&view, p->grad + l->w_off, 0.0f);
        }
    }
    if (net->n_params > from) memcpy(p->grad + from, g->grad + at, (net->n_params - from) * sizeof(float));
    return 0;
}

/* [ps] grad_clip_ratio: each weighted layer's slice of p's held gradient
 * is scaled down to ratio x the median norm of that layer's recent accepted
 * slices when it is longer (a bound a clean run's gradients do not reach:
 * its trajectory is unchanged), and its (clipped) norm is recorded. A
 * member can then move no layer by more than that bound a step, however it
 * spreads its gradient over the layers. n2: the layers' squared norms
 * (s_push_norm2, of the push p now holds). */
static void s_clip_layers(ps_server_t *s, ps_peer_t *p, const double *n2) {
    if (!(s->cfg->grad_clip_ratio > 0.0)) return;
    const net_t *net = s->model.net;
    for (int li = 0; li < net->n_layers; li++) {
        const layer_t *l = &net->layers[li];
        if (l->n_w + l->n_b == 0) continue;
        float *w = p->grad + l->w_off, *b = l->n_b ? p->grad + l->b_off : NULL;
        kfac_lowrank_t *e = p->lowrank.v ? kfac_lowrank_set_find(&p->lowrank, li) : NULL;
        if (e && e->n_rows <= 0) e = NULL;
        double norm = sqrt(n2[li]), med = 0.0;
        int n_recent = 0;
        const double bound = ps_guard_clip(s->guard, li, norm, s->cfg->grad_clip_ratio, &med, &n_recent);
        if (bound > 0.0) {
            float scale = (float)(bound / norm);
            for (size_t i = 0; i < l->n_w; i++) w[i] *= scale;
            for (size_t i = 0; i < l->n_b; i++) b[i] *= scale;
            if (e) kfac_lowrank_scale(e, scale);
            ps_counters_bump(&s->ctr, PS_CTR_CLIPPED);
            p->n_clipped++;
            uint64_t skipped = 0;
            char name[160];
            if (ratelimit_ok(ps_guard_rl(s->guard, PS_GUARD_LINE_CLIP), clock_now_ns(), PS_LOG_EVERY_MS, &skipped))
                log_warn("step %ld: %s: layer %s's gradient norm %.3g is more than [ps] grad_clip_ratio = %g times "
                         "the median %.3g of its last %d: clipped to %.3g (%" PRIu64 " clipped so far, %" PRIu64
                         " from this worker)",
                         s->round->t, ps_peer_name(p, name, sizeof name), l->name, norm, s->cfg->grad_clip_ratio, med,
                         n_recent, bound, ps_counter(&s->ctr, PS_CTR_CLIPPED), p->n_clipped);
        }
    }
}

/* [ps] heldout_n > 0: a new reference gradient (ps/heldout.h) at the
 * current parameters once the newest is heldout_every versions old and the
 * reference thread is idle. */
static void s_heldout_refresh(ps_server_t *s) {
    if (!s->heldout || ps_heldout_busy(s->heldout)) return;
    uint64_t v = 0;
    if (ps_heldout_ref(s->heldout, &v, NULL) && (uint64_t)s->round->t < v + (uint64_t)s->cfg->heldout_every) return;
    const int rc = ps_heldout_submit(s->heldout, (uint64_t)s->round->t, s->model.net->params,
                                     s->model.net->n_state ? s->model.net->state : NULL);
    if (rc < 0 && rc != -EBUSY && rc != -EPIPE) log_warn("held-out reference: cannot queue one: %s", strerror(-rc));
}

/* The push of p against the server's reference gradient, from p's history
 * (ps/drift.h): 0 when it may go on (no reference yet, or its pushes keep
 * no direction of their own that the reference does not share), -1 when it
 * was refused (answered, logged, counted). */
static int s_heldout_judge(ps_server_t *s, ps_peer_t *p, const msg_t *m) {
    uint64_t rv = 0;
    const float *v = ps_heldout_ref(s->heldout, &rv, NULL);
    ps_drift_verdict_t d;
    if (!v || ps_drift_judge(s->drift, s->model.net, p->role, p->ident ? p->ident->id : p->id,
                             p->ident ? p->ident->key : p->key, &m->grad_push, v, s->cfg->heldout_z, &d) < 0)
        return 0;
    if (LOG_LEVEL_DEBUG <= log_level_now) { /* the name is formatted only for the line */
        char name[160];
        log_debug("step %ld: %s against the reference of version %" PRIu64 ": e %.4g, mean %.4g, z %.3g, norm %.4g, "
                  "%d pushes judged", s->round->t, ps_peer_name(p, name, sizeof name), rv, d.e, d.mu, d.z, d.g_norm,
                  d.n_judged);
    }
    if (d.spared) {
        ps_counters_bump(&s->ctr, PS_CTR_DRIFT_SPARED);
        char name[160];
        uint64_t skipped = 0;
        if (ratelimit_ok(ps_guard_rl(s->guard, PS_GUARD_LINE_HELDOUT), clock_now_ns(), PS_LOG_EVERY_MS, &skipped))
            log_warn("step %ld: %s's gradients keep a direction the reference gradient (version %" PRIu64
                     ") does not share, z = %.3g > [ps] heldout_z = %g, but so do every other worker's: not refused "
                     "(the reference, not the members, is likely off; %" PRIu64 " spared so far)",
                     s->round->t, ps_peer_name(p, name, sizeof name), rv, d.z, s->cfg->heldout_z,
                     ps_counter(&s->ctr, PS_CTR_DRIFT_SPARED));
    }
    if (!d.refuse) return 0;
    ps_counters_bump(&s->ctr, PS_CTR_REJ_DRIFT);
    ps_io_reject_rl(s, ps_guard_rl(s->guard, PS_GUARD_LINE_HELDOUT), &p->route, p, MSG_GRAD_PUSH, MSG_ERR_INVALID,
                    "its gradients keep a direction of their own that kfac-ps's reference gradient (%d held-out "
                    "training examples, version %" PRIu64 ") does not share: %.3g along it on average, z = %.3g "
                    "after %d of its pushes, more than [ps] heldout_z = %g (%" PRIu64 " refused so far)",
                    ps_heldout_n(s->heldout), rv, d.mu, d.z, d.n_judged, s->cfg->heldout_z,
                    ps_counter(&s->ctr, PS_CTR_REJ_DRIFT));
    ps_round_after_reject(s, p, m);
    return -1;
}

int ps_round_push_share(const ps_server_t *s, const ps_peer_t *p) {
    if (!p->key[0]) return 1;                  /* a member id is one member */
    return (int)s->cfg->members_per_key;       /* a key holds this many (0: any number) */
}

void ps_round_grad_push(ps_server_t *s, ps_peer_t *p, msg_t *m) {
    msg_grad_push_t *g = &m->grad_push;
    char err[600];
    /* Finite floats first, as msg_validate would have refused them: it left
     * the dense gradient's NaN and Inf to this pass (the server's limits,
     * grad_finite_later), since a sum of squares in double is finite
     * exactly when every float is; the norm then serves the rules below
     * and the clip (layer_n2). */
    double *layer_n2 = ps_guard_layer_n2(s->guard);
    double norm2 = s_push_norm2(s->model.net, g, layer_n2);
    if (!isfinite(norm2)) {
        const size_t bad = msg_first_nonfinite(g->grad, g->n_grad);
        if (bad < g->n_grad)
            ps_io_reject(s, &p->route, p, MSG_GRAD_PUSH, MSG_ERR_INVALID, "grad_push.grad%s[%zu] is %s",
                         g->n_lowrank ? " (without the factored weights)" : "", bad,
                         isnan(g->grad[bad]) ? "NaN" : "Inf");
        else /* finite floats: a factored layer's Gram products overflow */
            ps_io_reject(s, &p->route, p, MSG_GRAD_PUSH, MSG_ERR_INVALID,
                         "the gradient's norm is not finite: its factored layers' norm (Gram products of D and X) "
                         "overflows");
        ps_round_after_reject(s, p, m);
        return;
    }
    double norm = sqrt(norm2), med = 0.0;
    int n_recent = 0;
    if (p->ident->demoted) {
        ps_io_reject(s, &p->route, p, MSG_GRAD_PUSH, MSG_ERR_INVALID,
                     "this worker stalled %d times ([ps] stall_max_drops): it is no member of the rounds again",
                     p->ident->n_stalls);
        ps_member_answered(p);
        return;
    }
    ps_member_pushes_again(p);
    switch (ps_member_check_push(p, s->life.phase == PS_PHASE_RUNNING, s->round->t, g->version,
                                 s->cfg->gradient_staleness)) {
    case PS_PUSH_RUN_OVER:
        ps_member_wait_params(p, (uint64_t)s->round->t + 1); /* the run is over: Shutdown will answer */
        return;
    case PS_PUSH_AHEAD:
        ps_io_reject(s, &p->route, p, MSG_GRAD_PUSH, MSG_ERR_INVALID,
                      "grad_push.version %" PRIu64 " is ahead of the server's %ld", g->version, s->round->t);
        return;
    case PS_PUSH_STALE:
        /* Taken at parameters older than [ps] gradient_staleness allows (the
         * worker was dropped, joined late, or is that slow): discarded; the
         * worker gets the current ones. */
        ps_counters_bump(&s->ctr, PS_CTR_STALE_GRADS);
        log_debug("stale gradient of version %" PRIu64 " from %s#%u at step %ld", g->version,
                  msg_role_name(p->role), p->id, s->round->t);
        ps_round_send_params(s, p);
        return;
    case PS_PUSH_DUPLICATE:
        ps_io_reject(s, &p->route, p, MSG_GRAD_PUSH, MSG_ERR_UNEXPECTED,
                      "a second gradient for version %ld from the same worker", s->round->t);
        return;
    case PS_PUSH_ACCEPT:
        break;
    }
    /* One identity, one share of a round: a member that pushed, left and
     * came back (a new connection, a new peer record) has already put its
     * gradient in (ps/ident.h). */
    const int share = ps_round_push_share(s, p);
    if (!ps_ident_may_push(p->ident, s->round->t, share)) {
        ps_counters_bump(&s->ctr, PS_CTR_REPUSHED);
        ps_io_reject(s, &p->route, p, MSG_GRAD_PUSH, MSG_ERR_INVALID,
                     "its identity (%s) already put %d gradient%s into the round of step %ld: a member that leaves and "
                     "comes back gets no second share (%" PRIu64 " refused so far)",
                     p->key[0] ? "its CURVE key" : "its member id", share, share == 1 ? "" : "s", s->round->t,
                     ps_counter(&s->ctr, PS_CTR_REPUSHED));
        ps_round_after_reject(s, p, m);
        return;
    }
    /* What one member may put into the round: at most a batch of examples,
     * a norm near the recent ones (norm: measured at the top, with the floats). */
    switch (ps_guard_check_grad(s->guard, g->n_examples, s->cfg->batch, norm, s->cfg->grad_norm_max_ratio, &med,
                                &n_recent)) {
    case PS_GRAD_TOO_MANY_EXAMPLES:
        ps_counters_bump(&s->ctr, PS_CTR_REJ_EXAMPLES);
        ps_io_reject_rl(s, ps_guard_rl(s->guard, PS_GUARD_LINE_EXAMPLES), &p->route, p, MSG_GRAD_PUSH, MSG_ERR_INVALID,
                     "grad_push.n_examples = %" PRIu64 " is more than [data] batch = %d", g->n_examples, s->cfg->batch);
        ps_round_after_reject(s, p, m);
        return;
    case PS_GRAD_NORM_OUTLIER:
        ps_counters_bump(&s->ctr, PS_CTR_REJ_NORM);
        ps_round_state_norm_reject(s->round);
        ps_io_reject_rl(s, ps_guard_rl(s->guard, PS_GUARD_LINE_NORM), &p->route, p, MSG_GRAD_PUSH, MSG_ERR_INVALID,
                     "gradient norm %.3g is more than [ps] grad_norm_max_ratio = %g times the median %.3g of the "
                     "last %d accepted (%" PRIu64 " rejected so far)",
                     norm, s->cfg->grad_norm_max_ratio, med, n_recent, ps_counter(&s->ctr, PS_CTR_REJ_NORM));
        ps_round_after_reject(s, p, m);
        return;
    case PS_GRAD_OK:
        break;
    }
    /* Against the server's own reference gradient (ps/heldout.h): a worker
     * whose gradients keep a direction of their own that the gradient
     * kfac-ps measures on its held-out examples does not share is refused
     * (ps/drift.h), however few members there are to compare it with. */
    s_heldout_refresh(s);
    if (s->heldout && s->drift && s_heldout_judge(s, p, m) < 0) return;
    /* Batch-norm running statistics: a variance below 0 would make the
     * evaluation and the exported weights NaN (msg_validate rejected NaN and
     * Inf); a value far from the published one (two of 3e38 average to Inf)
     * is no moving-average step of any batch (PS_BN_VAR_MAX_RATIO). */
    if (s->model.net->n_state && g->n_state == s->model.net->n_state)
        for (int li = 0; li < s->model.net->n_layers; li++) {
            const layer_t *l = &s->model.net->layers[li];
            if (l->kind != LAYER_BATCHNORM || !l->run_var) continue;
            const size_t off = (size_t)(l->run_var - s->model.net->state);
            const size_t moff = l->run_mean ? (size_t)(l->run_mean - s->model.net->state) : off;
            for (int c = 0; c < l->c; c++) {
                const double v = g->state[off + c], vp = (double)l->run_var[c] + (double)l->eps;
                const double mu = l->run_mean ? g->state[moff + c] : 0.0, mp = l->run_mean ? l->run_mean[c] : 0.0;
                const double var_max = PS_BN_VAR_MAX_RATIO * vp, dev_max = PS_BN_MEAN_MAX_DEV * sqrt(vp) + 1.0;
                if (v >= 0.0 && v <= var_max && fabs(mu - mp) <= dev_max) continue;
                if (v >= 0.0 && v <= var_max)
                    ps_io_reject(s, &p->route, p, MSG_GRAD_PUSH, MSG_ERR_INVALID,
                                 "grad_push.state: running mean of layer %s channel %d is %g, more than %g from the "
                                 "published %g (no moving-average step of a batch goes that far)",
                                 l->name, c, mu, dev_max, mp);
                else if (!(v >= 0.0))
                    ps_io_reject(s, &p->route, p, MSG_GRAD_PUSH, MSG_ERR_INVALID,
                                 "grad_push.state: running variance of layer %s channel %d is %g, below 0", l->name,
                                 c, v);
                else
                    ps_io_reject(s, &p->route, p, MSG_GRAD_PUSH, MSG_ERR_INVALID,
                                 "grad_push.state: running variance of layer %s channel %d is %g, more than %g (%g x "
                                 "the published %g: no moving-average step of a batch goes that far)",
                                 l->name, c, v, var_max, PS_BN_VAR_MAX_RATIO, vp);
                ps_round_after_reject(s, p, m);
                return;
            }
        }
    /* Held until the step (or the fold, for statistics) and summed there in
     * rank order: the round's result does not depend on arrival order. */
    const size_t np = s->model.net->n_params, ns = s->model.net->n_state;
    if ((!p->grad && !(p->grad = malloc(np * sizeof(float)))) ||
        (ns && g->n_state == ns && !p->state && !(p->state = malloc(ns * sizeof(float)))) ||
        (g->stats.n_layers > 0 && s->model.kfac && !p->stats && !(p->stats = kfac_stats_new(s->model.net)))) {
        ps_io_reject(s, &p->route, p, MSG_GRAD_PUSH, MSG_ERR_INTERNAL, "out of memory holding the gradient");
        ps_round_after_reject(s, p, m);
        return;
    }
    /* Statistics ride in a GradPush only when the Params of its version
     * asked this worker for them ([kfac] stats = sync, a due version): any
     * other would reach the curvature, and the inverse daemons, with no
     * statistics worker's one-push-per-version rule. Asked ones pass the
     * statistics guard of a StatsPush (ps/stats_guard.h). */
    int has_stats = 0;
    if (g->stats.n_layers > 0) {
        if (!s->model.kfac || !p->mb.has_sent || !p->mb.stats_asked || p->mb.sent_version != g->version) {
            ps_io_reject(s, &p->route, p, MSG_GRAD_PUSH, MSG_ERR_INVALID,
                         "grad_push.stats: statistics nobody asked for (the Params of version %" PRIu64
                         " did not ask this worker for any; [kfac] stats = %s)",
                         g->version, !s->model.kfac ? "none ([optimizer] kind = sgd)"
                                     : s->cfg->stats_mode == RUNCFG_STATS_SYNC ? "sync, not due at that version"
                                                                               : "async, from kfac-statsd");
            ps_round_after_reject(s, p, m);
            return;
        }
        if (ps_ingest_stats_unpack(&s->shape, &g->stats, (double)g->n_examples, p->stats, s->unpack_buf, err,
                                 sizeof err) < 0) {
            ps_io_reject(s, &p->route, p, MSG_GRAD_PUSH, MSG_ERR_INVALID, "%s", err);
            ps_round_after_reject(s, p, m);
            return;
        }
        /* the guard's histories are the curvature thread's: taken while no task runs */
        ps_curv_lock(s->curv);
        int grc = ps_stats_guard_check(s->stats_guard, p->stats, s->cfg->stats_trace_max_ratio, ps_model_layer_name,
                                       s->model.net, err, sizeof err);
        ps_curv_unlock(s->curv);
        if (grc < 0) {
            ps_io_reject(s, &p->route, p, MSG_GRAD_PUSH, MSG_ERR_INVALID, "grad_push.%s", err);
            ps_round_after_reject(s, p, m);
            return;
        }
        has_stats = 1;
    }
    {
        const uint64_t now = clock_now_ns(), since = p->params_ns > s->round->open_ns ? p->params_ns : s->round->open_ns;
        ps_guard_accepted(s->guard, norm, now > since ? now - since : 0);
    }
    if (s_hold_grad(s, p, g) < 0) {
        ps_io_reject(s, &p->route, p, MSG_GRAD_PUSH, MSG_ERR_INTERNAL, "out of memory holding the gradient");
        ps_round_after_reject(s, p, m);
        return;
    }
    s_clip_layers(s, p, layer_n2);
    const int has_state = ns && g->n_state == ns;
    if (has_state) memcpy(p->state, g->state, ns * sizeof(float));
    p->loss = g->loss;
    p->grad_version = g->version;
    p->n_examples = g->n_examples;
    p->n_correct = g->n_correct;
    ps_round_state_grad_in(s->round, g->version);
    ps_counters_bump(&s->ctr, PS_CTR_GRADS_TOTAL);
    ps_member_pushed(p, has_stats, has_state, (uint64_t)s->round->t + 1);
    ps_ident_pushed(p->ident, s->round->t);
    if (has_stats) { /* the traces later pushes are judged by */
        ps_curv_lock(s->curv);
        ps_stats_guard_accept(s->stats_guard, p->stats);
        ps_curv_unlock(s->curv);
    }
    ps_peer_accepted(p);
    ps_round_try_step(s);
}

