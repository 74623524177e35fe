/* ps/drift.c — see drift.h. */
#include "ps/drift.h"

#include <errno.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/kfac/kfac_step.h"
#include "common/kfac/kfac_lowrank.h"

/* A member of the table. Its history is kept in the form a checkpoint
 * holds it (ps_drift_saved_t), so that ps_drift_save and ps_drift_put copy
 * it whole and the fields are named in one place; hist.m stays NULL here:
 * the running mean direction is the table's own m below. hist.key is
 * always NUL-terminated within its length. */
typedef struct s_member {
    int used;
    ps_drift_saved_t hist; /* identity, counts, statistics; hist.judged_at: for replacement */
    float *m;              /* (n_params) running mean of its pushes, valid with hist.has_m */
} s_member_t;

struct ps_drift {
    size_t n_params;
    float *dense;        /* (n_params) scratch: the push densified */
    uint64_t n_judged;
    s_member_t v[PS_DRIFT_MAX];
};

ps_drift_t *ps_drift_new(size_t n_params) {
    ps_drift_t *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->n_params = n_params;
    if (!(d->dense = malloc((n_params ? n_params : 1) * sizeof(float)))) {
        free(d);
        return NULL;
    }
    return d;
}

void ps_drift_free(ps_drift_t **d_p) {
    if (!d_p || !*d_p) return;
    ps_drift_t *d = *d_p;
    *d_p = NULL;
    for (int i = 0; i < PS_DRIFT_MAX; i++) free(d->v[i].m);
    free(d->dense);
    free(d);
}

/* The member's record: found, or a free slot, or the one judged longest
 * ago (its history forgotten). NULL when out of memory. */
static s_member_t *s_member(ps_drift_t *d, msg_role_t role, uint32_t id, const char *key) {
    const char *k = key ? key : "";
    s_member_t *free_slot = NULL, *oldest = NULL;
    for (int i = 0; i < PS_DRIFT_MAX; i++) {
        s_member_t *x = &d->v[i];
        if (!x->used) {
            if (!free_slot) free_slot = x;
            continue;
        }
        if (x->hist.role == role && x->hist.id == id && strncmp(x->hist.key, k, sizeof x->hist.key) == 0) return x;
        if (!oldest || x->hist.judged_at < oldest->hist.judged_at) oldest = x;
    }
    s_member_t *x = free_slot ? free_slot : oldest;
    float *m = x->m;
    memset(x, 0, sizeof *x);
    if (!m && !(m = malloc((d->n_params ? d->n_params : 1) * sizeof(float)))) return NULL;
    x->m = m;
    x->used = 1;
    x->hist.role = role;
    x->hist.id = id;
    strncpy(x->hist.key, k, sizeof x->hist.key - 1);
    return x;
}

int ps_drift_judge_dense(ps_drift_t *d, msg_role_t role, uint32_t id, const char *key, const float *g,
                         const float *v, double z_max, ps_drift_verdict_t *out) {
    memset(out, 0, sizeof *out);
    s_member_t *x = s_member(d, role, id, key);
    if (!x) return -ENOMEM;
    ps_drift_saved_t *h = &x->hist;
    const size_t n = d->n_params;
    h->judged_at = ++d->n_judged;
    h->n_judged++;
    const double gn = sqrt(kfac_step_norm2(g, n));
    out->g_norm = gn;
    out->n_judged = h->n_judged;
    if (h->has_m) {
        /* e = <g - v, u>, u = m / ||m|| */
        double gm = kfac_step_dot(g, x->m, n), vm = kfac_step_dot(v, x->m, n), mm = kfac_step_norm2(x->m, n);
        if (mm > 0.0) {
            const double e = (gm - vm) / sqrt(mm);
            h->n++;
            const double w = 1.0 / h->n > PS_DRIFT_ALPHA ? 1.0 / h->n : PS_DRIFT_ALPHA;
            if (h->n == 1) {
                h->mu = e;
                h->s2 = 0.0;
                h->gbar = gn;
            } else {
                /* running mean and variance with weight w (West's update) */
                const double diff = e - h->mu;
                h->mu += w * diff;
                h->s2 = (1.0 - w) * (h->s2 + w * diff * diff);
                h->gbar += w * (gn - h->gbar);
            }
            const double floor = PS_DRIFT_FLOOR * h->gbar;
            const double var = h->s2 * PS_DRIFT_ALPHA / (2.0 - PS_DRIFT_ALPHA) + floor * floor;
            out->e = e;
            out->mu = h->mu;
            out->z = var > 0.0 ? h->mu / sqrt(var) : 0.0;
        }
    }
    h->z = out->z;
    if (h->n_judged >= PS_DRIFT_MIN_PUSHES && out->z > z_max) {
        int within = 0; /* another member of its role, judged lately, within the bound */
        for (int i = 0; i < PS_DRIFT_MAX && !within; i++) {
            const s_member_t *y = &d->v[i];
            within = y != x && y->used && y->hist.role == role && y->hist.n_judged >= PS_DRIFT_MIN_PUSHES &&
                     d->n_judged - y->hist.judged_at < PS_DRIFT_RECENT && !(y->hist.z > z_max);
        }
        out->refuse = within;
        out->spared = !within;
    }
    h->refusing = out->refuse;
    /* m <- beta m + (1 - beta) g; the first push: m = g */
    if (!h->has_m) {
        memcpy(x->m, g, n * sizeof(float));
        h->has_m = 1;
    } else {
        const float b = (float)PS_DRIFT_BETA, a = 1.0f - b;
        for (size_t i = 0; i < n; i++) x->m[i] = b * x->m[i] + a * g[i];
    }
    return 0;
}

/* g (a GradPush's gradient) as a dense arena into out (n_params floats):
 * the dense runs copied, each factored layer's weights densified as D^T X.
 * Returns 0 or -EINVAL when the lengths do not fit net. */
static int s_densify(const net_t *net, const msg_grad_push_t *g, float *out) {
    size_t at = 0, from = 0;
    for (size_t i = 0; i < g->n_lowrank; i++) {
        const msg_lowrank_t *f = &g->lowrank[i];
        if (f->layer >= (uint32_t)net->n_layers) return -EINVAL;
        const layer_t *l = &net->layers[f->layer];
        const int in = l->in_c * l->in_h * l->in_w;
        if (l->w_off < from || at + (l->w_off - from) > g->n_grad || f->n_d != (size_t)f->n_rows * (size_t)l->out ||
            f->n_x != (size_t)f->n_rows * (size_t)in || (size_t)l->out * (size_t)in != l->n_w)
            return -EINVAL;
        memcpy(out + from, g->grad + at, (l->w_off - from) * sizeof(float));
        at += l->w_off - from;
        kfac_lowrank_t view = {.layer = (int)f->layer, .n_out = l->out, .n_in = in, .w_off = l->w_off,
                               .n_rows = (int)f->n_rows, .D = f->d, .X = f->x};
        kfac_lowrank_densify(&view, out + l->w_off, 0.0f); /* W (out, in) = D^T X */
        from = l->w_off + l->n_w;
    }
    if (from > net->n_params || g->n_grad - at != net->n_params - from) return -EINVAL;
    memcpy(out + from, g->grad + at, (net->n_params - from) * sizeof(float));
    return 0;
}

int ps_drift_judge(ps_drift_t *d, const net_t *net, msg_role_t role, uint32_t id, const char *key,
                   const msg_grad_push_t *g, const float *v, double z_max, ps_drift_verdict_t *out) {
    memset(out, 0, sizeof *out);
    if (net->n_params != d->n_params || s_densify(net, g, d->dense) < 0) return -EINVAL;
    return ps_drift_judge_dense(d, role, id, key, d->dense, v, z_max, out);
}

int ps_drift_refusing(const ps_drift_t *d) {
    int n = 0;
    for (int i = 0; d && i < PS_DRIFT_MAX; i++) n += d->v[i].used && d->v[i].hist.refusing;
    return n;
}

/* ---- the table in a checkpoint ---- */

uint64_t ps_drift_judged(const ps_drift_t *d) { return d ? d->n_judged : 0; }

size_t ps_drift_n_params(const ps_drift_t *d) { return d ? d->n_params : 0; }

int ps_drift_save(const ps_drift_t *d, ps_drift_saved_t *out, int max) {
    int k = 0;
    for (int i = 0; d && i < PS_DRIFT_MAX; i++) {
        const s_member_t *x = &d->v[i];
        if (!x->used) continue;
        if (out && k < max) {
            out[k] = x->hist;
            out[k].m = x->hist.has_m ? x->m : NULL;
        }
        k++;
    }
    return k;
}

int ps_drift_validate_one(const ps_drift_saved_t *x, uint64_t n_judged, char *why, size_t why_len) {
    if (x->role != MSG_ROLE_WORKER && x->role != MSG_ROLE_STATSD && x->role != MSG_ROLE_INVERTD) {
        snprintf(why, why_len, "member %u: not a member's role", x->id);
        return -EINVAL;
    }
    if (memchr(x->key, 0, sizeof x->key) == NULL) {
        snprintf(why, why_len, "member %u: its key is not terminated", x->id);
        return -EINVAL;
    }
    if (x->n < 0 || x->n_judged < 0 || x->n > x->n_judged || x->judged_at > n_judged || (x->n > 0 && !x->has_m)) {
        snprintf(why, why_len, "member %u: impossible counts (%d values, %d judged, last at %llu of %llu)", x->id, x->n,
                 x->n_judged, (unsigned long long)x->judged_at, (unsigned long long)n_judged);
        return -EINVAL;
    }
    if (!isfinite(x->mu) || !isfinite(x->s2) || !isfinite(x->gbar) || !isfinite(x->z) || x->s2 < 0.0 || x->gbar < 0.0) {
        snprintf(why, why_len, "member %u: a statistic that is not finite, or a negative variance or norm", x->id);
        return -EINVAL;
    }
    return 0;
}

void ps_drift_clear(ps_drift_t *d, uint64_t n_judged) {
    for (int i = 0; i < PS_DRIFT_MAX; i++) {
        float *m = d->v[i].m;
        memset(&d->v[i], 0, sizeof d->v[i]);
        d->v[i].m = m; /* kept for reuse */
    }
    d->n_judged = n_judged;
}

float *ps_drift_put(ps_drift_t *d, const ps_drift_saved_t *x, int *rc) {
    char why[160];
    *rc = 0;
    if (ps_drift_validate_one(x, d->n_judged, why, sizeof why) < 0) {
        *rc = -EINVAL;
        return NULL;
    }
    s_member_t *slot = NULL;
    for (int i = 0; i < PS_DRIFT_MAX; i++) {
        s_member_t *y = &d->v[i];
        if (y->used && y->hist.role == x->role && y->hist.id == x->id &&
            strncmp(y->hist.key, x->key, sizeof y->hist.key) == 0) {
            *rc = -EINVAL; /* the same identity twice */
            return NULL;
        }
        if (!y->used && !slot) slot = y;
    }
    if (!slot) {
        *rc = -EINVAL; /* more than PS_DRIFT_MAX */
        return NULL;
    }
    if (!slot->m && !(slot->m = malloc((d->n_params ? d->n_params : 1) * sizeof(float)))) {
        *rc = -ENOMEM;
        return NULL;
    }
    slot->used = 1;
    slot->hist = *x;
    slot->hist.key[sizeof slot->hist.key - 1] = 0;
    slot->hist.m = NULL; /* the direction is the table's own slot->m */
    if (!x->has_m) memset(slot->m, 0, d->n_params * sizeof(float));
    return slot->m;
}
