/* common/nn/nn_dnnl.c — see nn_dnnl.h.
 *
 * Per batch size (s_size_t) three primitives, made with format "any" so
 * that oneDNN picks the layouts its fastest kernels want, plus one reorder
 * per argument whose chosen layout is not the caller's plain one. The
 * scratchpad is user-managed (one per part), so that parts running at the
 * same time never share oneDNN's internal buffers.
 *
 * oneDNN's threads are OpenMP's (Debian builds libdnnl with libgomp):
 * omp_set_num_threads is per calling thread, and each part sets 1 before
 * every call, so no thread ever starts an OpenMP team.
 */
#include "common/nn/nn_dnnl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "common/nn/nn_par.h"

/* libgomp's (linked with -lgomp; declared here so that no OpenMP compiler
 * flag or header is needed). */
void omp_set_num_threads(int n);

/* Batch sizes kept: a pass needs at most two (part sizes differ by one);
 * the rest cover a shorter last batch of an evaluation. */
#define S_N_SIZES 4

enum {
    S_FWD_SRC, S_FWD_WEI, S_FWD_DST,
    S_BD_DDST, S_BD_WEI, S_BD_DSRC,
    S_BW_SRC, S_BW_DDST, S_BW_DWEI,
    S_N_ARGS
};

/* Inputs are converted plain -> primitive layout, outputs the other way. */
static const int s_is_output[S_N_ARGS] = {[S_FWD_DST] = 1, [S_BD_DSRC] = 1, [S_BW_DWEI] = 1};

typedef struct s_arg {
    dnnl_memory_desc_t plain;  /* the caller's layout */
    dnnl_memory_desc_t prim;   /* the primitive's */
    dnnl_primitive_t reorder;  /* NULL when prim is plain */
    size_t n_bytes;            /* of prim */
} s_arg_t;

typedef struct s_size {
    int m;                     /* examples; 0: unused slot */
    dnnl_primitive_t fwd, bwd_d, bwd_w;
    s_arg_t arg[S_N_ARGS];
    dnnl_memory_desc_t bias;   /* (O), plain */
    size_t scratch_bytes;      /* largest of the three */
    char impl[128];
} s_size_t;

typedef struct s_part {
    dnnl_stream_t stream;
    void *buf[S_N_ARGS];       /* arguments in the primitive's layout */
    size_t cap[S_N_ARGS];
    void *scratch;
    size_t scratch_cap;
    float *dx_tmp;             /* dx_add: the input gradient before it is added */
    size_t dx_cap;             /* floats */
    s_size_t *sz;              /* this pass's primitives */
} s_part_t;

struct nn_dnnl_conv {
    dnnl_engine_t engine;
    int C, H, W, O, OH, OW, k, s, pad, has_bias, dx_add;
    s_size_t sizes[S_N_SIZES];
    int next_slot;             /* round-robin eviction */
    s_part_t *parts;
    int n_parts_cap;
    const char *impl;
};

/* ---- helpers --------------------------------------------------------------- */

static void s_size_release(s_size_t *z) {
    if (z->fwd) dnnl_primitive_destroy(z->fwd);
    if (z->bwd_d) dnnl_primitive_destroy(z->bwd_d);
    if (z->bwd_w) dnnl_primitive_destroy(z->bwd_w);
    for (int a = 0; a < S_N_ARGS; a++)
        if (z->arg[a].reorder) dnnl_primitive_destroy(z->arg[a].reorder);
    memset(z, 0, sizeof *z);
}

/* Set up argument a: the reorder between plain and prim when they differ. */
static int s_arg_init(dnnl_engine_t eng, s_arg_t *a, const dnnl_memory_desc_t *plain,
                      const dnnl_memory_desc_t *prim, int is_output) {
    a->plain = *plain;
    a->prim = *prim;
    a->n_bytes = dnnl_memory_desc_get_size(prim);
    a->reorder = NULL;
    if (dnnl_memory_desc_equal(plain, prim)) return 0;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st = is_output ? dnnl_reorder_primitive_desc_create(&pd, prim, eng, plain, eng, NULL)
                                 : dnnl_reorder_primitive_desc_create(&pd, plain, eng, prim, eng, NULL);
    if (st == dnnl_success) st = dnnl_primitive_create(&a->reorder, pd);
    if (pd) dnnl_primitive_desc_destroy(pd);
    return st == dnnl_success ? 0 : -ENOTSUP;
}

static size_t s_scratch_bytes(const_dnnl_primitive_desc_t pd) {
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    return md ? dnnl_memory_desc_get_size(md) : 0;
}

static const char *s_impl(const_dnnl_primitive_desc_t pd) {
    const char *s = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &s) != dnnl_success || !s) return "?";
    return s;
}

/* Make the primitives for m examples into z. */
static int s_size_init(nn_dnnl_conv_t *c, s_size_t *z, int m) {
    memset(z, 0, sizeof *z);
    int rc = -ENOTSUP;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t fpd = NULL, dpd = NULL, wpd = NULL;
    dnnl_memory_desc_t src, wei, dst, src_any, wei_any, dst_any;
    dnnl_dims_t ds = {m, c->C, c->H, c->W}, dw = {c->O, c->C, c->k, c->k}, dd = {m, c->O, c->OH, c->OW};
    dnnl_dims_t db = {c->O}, strides = {c->s, c->s}, pad = {c->pad, c->pad};
    if (dnnl_memory_desc_init_by_tag(&src, 4, ds, dnnl_f32, dnnl_nchw) ||
        dnnl_memory_desc_init_by_tag(&wei, 4, dw, dnnl_f32, dnnl_oihw) ||
        dnnl_memory_desc_init_by_tag(&dst, 4, dd, dnnl_f32, dnnl_nchw) ||
        dnnl_memory_desc_init_by_tag(&z->bias, 1, db, dnnl_f32, dnnl_a) ||
        dnnl_memory_desc_init_by_tag(&src_any, 4, ds, dnnl_f32, dnnl_format_tag_any) ||
        dnnl_memory_desc_init_by_tag(&wei_any, 4, dw, dnnl_f32, dnnl_format_tag_any) ||
        dnnl_memory_desc_init_by_tag(&dst_any, 4, dd, dnnl_f32, dnnl_format_tag_any))
        goto cleanup;
    if (dnnl_primitive_attr_create(&attr) || dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user))
        goto cleanup;
    const dnnl_memory_desc_t *bias = c->has_bias ? &z->bias : NULL;
    dnnl_convolution_desc_t fd, bd, wd;
    /* Padding right = left: oneDNN then derives the same floor((H + 2 pad - k) / s) + 1 as nn. */
    if (dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &src_any, &wei_any,
                                           bias, &dst_any, strides, pad, pad) ||
        dnnl_primitive_desc_create(&fpd, &fd, attr, c->engine, NULL) ||
        dnnl_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, &src_any, &wei_any, &dst_any, strides,
                                                 pad, pad) ||
        dnnl_primitive_desc_create(&dpd, &bd, attr, c->engine, fpd) ||
        dnnl_convolution_backward_weights_desc_init(&wd, dnnl_convolution_direct, &src_any, &wei_any, bias, &dst_any,
                                                    strides, pad, pad) ||
        dnnl_primitive_desc_create(&wpd, &wd, attr, c->engine, fpd))
        goto cleanup;
#define S_MD(pd, q) dnnl_primitive_desc_query_md(pd, q, 0)
    if (s_arg_init(c->engine, &z->arg[S_FWD_SRC], &src, S_MD(fpd, dnnl_query_src_md), 0) ||
        s_arg_init(c->engine, &z->arg[S_FWD_WEI], &wei, S_MD(fpd, dnnl_query_weights_md), 0) ||
        s_arg_init(c->engine, &z->arg[S_FWD_DST], &dst, S_MD(fpd, dnnl_query_dst_md), 1) ||
        s_arg_init(c->engine, &z->arg[S_BD_DDST], &dst, S_MD(dpd, dnnl_query_diff_dst_md), 0) ||
        s_arg_init(c->engine, &z->arg[S_BD_WEI], &wei, S_MD(dpd, dnnl_query_weights_md), 0) ||
        s_arg_init(c->engine, &z->arg[S_BD_DSRC], &src, S_MD(dpd, dnnl_query_diff_src_md), 1) ||
        s_arg_init(c->engine, &z->arg[S_BW_SRC], &src, S_MD(wpd, dnnl_query_src_md), 0) ||
        s_arg_init(c->engine, &z->arg[S_BW_DDST], &dst, S_MD(wpd, dnnl_query_diff_dst_md), 0) ||
        s_arg_init(c->engine, &z->arg[S_BW_DWEI], &wei, S_MD(wpd, dnnl_query_diff_weights_md), 1))
        goto cleanup;
#undef S_MD
    if (c->has_bias && !dnnl_memory_desc_equal(&z->bias, dnnl_primitive_desc_query_md(wpd, dnnl_query_diff_weights_md, 1)))
        goto cleanup; /* a bias gradient not in plain (O) layout: not expected for f32 */
    if (dnnl_primitive_create(&z->fwd, fpd) || dnnl_primitive_create(&z->bwd_d, dpd) ||
        dnnl_primitive_create(&z->bwd_w, wpd))
        goto cleanup;
    z->scratch_bytes = s_scratch_bytes(fpd);
    if (s_scratch_bytes(dpd) > z->scratch_bytes) z->scratch_bytes = s_scratch_bytes(dpd);
    if (s_scratch_bytes(wpd) > z->scratch_bytes) z->scratch_bytes = s_scratch_bytes(wpd);
    snprintf(z->impl, sizeof z->impl, "fwd %s, bwd_d %s, bwd_w %s", s_impl(fpd), s_impl(dpd), s_impl(wpd));
    z->m = m;
    rc = 0;
cleanup:
    if (fpd) dnnl_primitive_desc_destroy(fpd);
    if (dpd) dnnl_primitive_desc_destroy(dpd);
    if (wpd) dnnl_primitive_desc_destroy(wpd);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (rc) s_size_release(z);
    return rc;
}

/* Grow *p to n_bytes (contents not kept). */
static int s_reserve(void **p, size_t *cap, size_t n_bytes) {
    if (n_bytes <= *cap) return 0;
    void *q = NULL;
    if (posix_memalign(&q, 64, n_bytes)) return -ENOMEM;
    free(*p);
    *p = q;
    *cap = n_bytes;
    return 0;
}

/* ---- public ---------------------------------------------------------------- */

nn_dnnl_conv_t *nn_dnnl_conv_new(const layer_t *l, int dx_add, char *err, size_t err_len) {
    if (err && err_len) err[0] = 0;
    if (!l || l->kind != LAYER_CONV) {
        if (err && err_len) snprintf(err, err_len, "not a conv layer");
        return NULL;
    }
    nn_dnnl_conv_t *c = calloc(1, sizeof *c);
    if (!c) {
        if (err && err_len) snprintf(err, err_len, "out of memory");
        return NULL;
    }
    c->C = l->in_c; c->H = l->in_h; c->W = l->in_w;
    c->O = l->out; c->OH = l->h; c->OW = l->w;
    c->k = l->k; c->s = l->stride; c->pad = l->pad;
    c->has_bias = l->bias != NULL || l->has_bias;
    c->dx_add = dx_add;
    dnnl_status_t st = dnnl_engine_create(&c->engine, dnnl_cpu, 0);
    if (st != dnnl_success) {
        if (err && err_len) snprintf(err, err_len, "oneDNN: no CPU engine (status %d)", (int)st);
        free(c);
        return NULL;
    }
    /* Made once here, so that a refusal shows at build time, not mid-run. */
    if (s_size_init(c, &c->sizes[0], 1) < 0) {
        if (err && err_len)
            snprintf(err, err_len, "oneDNN cannot make a convolution %dx%dx%d -> %dx%dx%d k=%d stride=%d pad=%d here",
                     c->C, c->H, c->W, c->O, c->OH, c->OW, c->k, c->s, c->pad);
        nn_dnnl_conv_free(&c);
        return NULL;
    }
    c->impl = c->sizes[0].impl;
    c->next_slot = 1;
    return c;
}

void nn_dnnl_conv_free(nn_dnnl_conv_t **c_p) {
    if (!c_p || !*c_p) return;
    nn_dnnl_conv_t *c = *c_p;
    *c_p = NULL;
    for (int i = 0; i < S_N_SIZES; i++) s_size_release(&c->sizes[i]);
    for (int p = 0; p < c->n_parts_cap; p++) {
        s_part_t *q = &c->parts[p];
        if (q->stream) dnnl_stream_destroy(q->stream);
        for (int a = 0; a < S_N_ARGS; a++) free(q->buf[a]);
        free(q->scratch);
        free(q->dx_tmp);
    }
    free(c->parts);
    if (c->engine) dnnl_engine_destroy(c->engine);
    free(c);
}

/* The primitives for m examples, made if needed in a slot taken round-robin
 * among those holding neither of this pass's part sizes lo and hi (so that
 * one part's primitives are never evicted for another part's). */
static s_size_t *s_size_get(nn_dnnl_conv_t *c, int m, int lo, int hi) {
    for (int i = 0; i < S_N_SIZES; i++)
        if (c->sizes[i].m == m) return &c->sizes[i];
    s_size_t *z = NULL;
    for (int i = 0; i < S_N_SIZES && !z; i++) {
        s_size_t *cand = &c->sizes[(c->next_slot + i) % S_N_SIZES];
        if (cand->m != lo && cand->m != hi) {
            z = cand;
            c->next_slot = (int)(cand - c->sizes + 1) % S_N_SIZES;
        }
    }
    if (!z) return NULL; /* not reached: S_N_SIZES > 2 */
    s_size_release(z);
    return s_size_init(c, z, m) < 0 ? NULL : z;
}

int nn_dnnl_conv_prepare(nn_dnnl_conv_t *c, int n, int n_parts) {
    if (!c || n < 1 || n_parts < 1) return -EINVAL;
    if (n_parts > c->n_parts_cap) {
        s_part_t *np = realloc(c->parts, (size_t)n_parts * sizeof *np);
        if (!np) return -ENOMEM;
        memset(np + c->n_parts_cap, 0, (size_t)(n_parts - c->n_parts_cap) * sizeof *np);
        c->parts = np;
        c->n_parts_cap = n_parts;
    }
    for (int p = 0; p < n_parts; p++) {
        s_part_t *q = &c->parts[p];
        int i0, i1;
        nn_par_range(n, p, n_parts, &i0, &i1);
        q->sz = NULL;
        if (i1 <= i0) continue;
        s_size_t *z = s_size_get(c, i1 - i0, n / n_parts, (n + n_parts - 1) / n_parts);
        if (!z) return -ENOTSUP;
        if (!q->stream && dnnl_stream_create(&q->stream, c->engine, dnnl_stream_default_flags) != dnnl_success)
            return -ENOTSUP;
        for (int a = 0; a < S_N_ARGS; a++)
            if (z->arg[a].reorder && s_reserve(&q->buf[a], &q->cap[a], z->arg[a].n_bytes) < 0) return -ENOMEM;
        if (s_reserve(&q->scratch, &q->scratch_cap, z->scratch_bytes ? z->scratch_bytes : 64) < 0) return -ENOMEM;
        if (c->dx_add) {
            size_t need = (size_t)(i1 - i0) * c->C * c->H * c->W * sizeof(float);
            size_t cap = q->dx_cap * sizeof(float);
            void *t = q->dx_tmp;
            if (s_reserve(&t, &cap, need) < 0) return -ENOMEM;
            q->dx_tmp = t;
            q->dx_cap = cap / sizeof(float);
        }
        q->sz = z;
        c->impl = z->impl;
    }
    return 0;
}

/* One call's memory objects, destroyed together. */
typedef struct s_mems {
    dnnl_memory_t m[24];
    int n;
} s_mems_t;

static dnnl_memory_t s_mem(s_mems_t *ms, dnnl_engine_t eng, const dnnl_memory_desc_t *md, const void *ptr) {
    dnnl_memory_t mem = NULL;
    if (ms->n == (int)(sizeof ms->m / sizeof ms->m[0])) return NULL;
    if (dnnl_memory_create(&mem, md, eng, (void *)ptr) != dnnl_success) return NULL;
    ms->m[ms->n++] = mem;
    return mem;
}

static void s_mems_release(s_mems_t *ms) {
    for (int i = 0; i < ms->n; i++) dnnl_memory_destroy(ms->m[i]);
    ms->n = 0;
}

static int s_run(dnnl_primitive_t p, dnnl_stream_t st, int n_args, const dnnl_exec_arg_t *args) {
    return p && dnnl_primitive_execute(p, st, n_args, args) == dnnl_success ? 0 : -EIO;
}

/* Memory for argument a in the primitive's layout: the user's pointer when
 * it already is, else the part's buffer, filled by the reorder for an input. */
static dnnl_memory_t s_arg_mem(nn_dnnl_conv_t *c, s_part_t *q, s_mems_t *ms, int a, const void *user, int *rc) {
    const s_arg_t *arg = &q->sz->arg[a];
    if (!arg->reorder) {
        dnnl_memory_t m = s_mem(ms, c->engine, &arg->plain, user);
        if (!m) *rc = -EIO;
        return m;
    }
    dnnl_memory_t prim = s_mem(ms, c->engine, &arg->prim, q->buf[a]);
    if (!prim) {
        *rc = -EIO;
        return NULL;
    }
    if (!s_is_output[a]) {
        dnnl_memory_t plain = s_mem(ms, c->engine, &arg->plain, user);
        dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, plain}, {DNNL_ARG_TO, prim}};
        if (!plain || s_run(arg->reorder, q->stream, 2, ra) < 0) *rc = -EIO;
    }
    return prim;
}

/* After the primitive: an output in the part's buffer goes to the user's layout. */
static void s_arg_out(nn_dnnl_conv_t *c, s_part_t *q, s_mems_t *ms, int a, dnnl_memory_t prim, void *user, int *rc) {
    const s_arg_t *arg = &q->sz->arg[a];
    if (!arg->reorder || *rc) return;
    dnnl_memory_t plain = s_mem(ms, c->engine, &arg->plain, user);
    dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, prim}, {DNNL_ARG_TO, plain}};
    if (!plain || s_run(arg->reorder, q->stream, 2, ra) < 0) *rc = -EIO;
}

static s_part_t *s_part(nn_dnnl_conv_t *c, int part, int m) {
    if (!c || part < 0 || part >= c->n_parts_cap) return NULL;
    s_part_t *q = &c->parts[part];
    if (!q->sz || q->sz->m != m) return NULL; /* not prepared for this size */
    omp_set_num_threads(1);
    return q;
}

int nn_dnnl_conv_forward(nn_dnnl_conv_t *c, int part, int m, const float *x, const float *w, const float *b,
                         float *y) {
    s_part_t *q = s_part(c, part, m);
    if (!q || !x || !w || !y) return -EINVAL;
    s_mems_t ms = {.n = 0};
    int rc = 0;
    dnnl_memory_t src = s_arg_mem(c, q, &ms, S_FWD_SRC, x, &rc);
    dnnl_memory_t wei = s_arg_mem(c, q, &ms, S_FWD_WEI, w, &rc);
    dnnl_memory_t dst = s_arg_mem(c, q, &ms, S_FWD_DST, y, &rc);
    dnnl_memory_t bias = c->has_bias && b ? s_mem(&ms, c->engine, &q->sz->bias, b) : NULL;
    if (!rc) {
        dnnl_memory_desc_t smd;
        dnnl_dims_t d = {(dnnl_dim_t)(q->scratch_cap)};
        dnnl_memory_desc_init_by_tag(&smd, 1, d, dnnl_u8, dnnl_a);
        dnnl_memory_t sm = s_mem(&ms, c->engine, &smd, q->scratch);
        dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst},
                                   {DNNL_ARG_SCRATCHPAD, sm}, {DNNL_ARG_BIAS, bias}};
        if (!sm || (c->has_bias && !bias)) rc = -EIO;
        else rc = s_run(q->sz->fwd, q->stream, bias ? 5 : 4, args);
    }
    s_arg_out(c, q, &ms, S_FWD_DST, dst, y, &rc);
    if (!rc && dnnl_stream_wait(q->stream) != dnnl_success) rc = -EIO;
    s_mems_release(&ms);
    return rc;
}

int nn_dnnl_conv_backward(nn_dnnl_conv_t *c, int part, int m, const float *x, const float *w, const float *dy,
                          float *dx, float *dw, float *db) {
    s_part_t *q = s_part(c, part, m);
    if (!q || !x || !w || !dy || !dw || (c->has_bias && !db)) return -EINVAL;
    s_mems_t ms = {.n = 0};
    int rc = 0;
    dnnl_memory_desc_t smd;
    dnnl_dims_t d = {(dnnl_dim_t)(q->scratch_cap)};
    dnnl_memory_t sm = NULL;
    if (dnnl_memory_desc_init_by_tag(&smd, 1, d, dnnl_u8, dnnl_a) != dnnl_success ||
        !(sm = s_mem(&ms, c->engine, &smd, q->scratch)))
        rc = -EIO;
    /* Weight gradient: dW (O, C, k, k), db (O) from x and dy. */
    dnnl_memory_t src = s_arg_mem(c, q, &ms, S_BW_SRC, x, &rc);
    dnnl_memory_t ddst = s_arg_mem(c, q, &ms, S_BW_DDST, dy, &rc);
    dnnl_memory_t dwei = s_arg_mem(c, q, &ms, S_BW_DWEI, dw, &rc);
    dnnl_memory_t dbias = c->has_bias ? s_mem(&ms, c->engine, &q->sz->bias, db) : NULL;
    if (!rc) {
        dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_DIFF_WEIGHTS, dwei},
                                   {DNNL_ARG_SCRATCHPAD, sm}, {DNNL_ARG_DIFF_BIAS, dbias}};
        if (c->has_bias && !dbias) rc = -EIO;
        else rc = s_run(q->sz->bwd_w, q->stream, c->has_bias ? 5 : 4, args);
    }
    s_arg_out(c, q, &ms, S_BW_DWEI, dwei, dw, &rc);
    /* Input gradient: dx (m, C, H, W) from dy and W. */
    if (dx && !rc) {
        float *out = c->dx_add ? q->dx_tmp : dx;
        dnnl_memory_t ddst2 = s_arg_mem(c, q, &ms, S_BD_DDST, dy, &rc);
        dnnl_memory_t wei = s_arg_mem(c, q, &ms, S_BD_WEI, w, &rc);
        dnnl_memory_t dsrc = s_arg_mem(c, q, &ms, S_BD_DSRC, out, &rc);
        if (!rc) {
            dnnl_exec_arg_t args[4] = {{DNNL_ARG_DIFF_DST, ddst2}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DIFF_SRC, dsrc},
                                       {DNNL_ARG_SCRATCHPAD, sm}};
            rc = s_run(q->sz->bwd_d, q->stream, 4, args);
        }
        s_arg_out(c, q, &ms, S_BD_DSRC, dsrc, out, &rc);
        if (!rc && dnnl_stream_wait(q->stream) != dnnl_success) rc = -EIO;
        if (!rc && c->dx_add) {
            const size_t n_x = (size_t)m * c->C * c->H * c->W;
            for (size_t j = 0; j < n_x; j++) dx[j] += out[j];
        }
    }
    if (!rc && dnnl_stream_wait(q->stream) != dnnl_success) rc = -EIO;
    s_mems_release(&ms);
    return rc;
}

const char *nn_dnnl_conv_impl(const nn_dnnl_conv_t *c) { return c && c->impl ? c->impl : "none"; }

int nn_dnnl_probe(char *why, size_t why_len) {
    /* A 2x6x6 -> 8x6x6 3x3 convolution, forward and backward, on one example. */
    layer_t l = {.kind = LAYER_CONV, .in_c = 2, .in_h = 6, .in_w = 6, .c = 8, .h = 6, .w = 6, .out = 8,
                 .k = 3, .stride = 1, .pad = 1, .has_bias = 1};
    char err[160];
    nn_dnnl_conv_t *c = nn_dnnl_conv_new(&l, 0, err, sizeof err);
    if (!c) {
        if (why && why_len) snprintf(why, why_len, "%s (run-time code generation denied?)", err);
        return 0;
    }
    float x[2 * 36], w[8 * 18], b[8], y[8 * 36], dx[2 * 36], dw[8 * 18], db[8];
    for (int i = 0; i < 72; i++) x[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < 144; i++) w[i] = (float)(i % 5) - 2.0f;
    for (int i = 0; i < 8; i++) b[i] = 0.5f;
    int rc = nn_dnnl_conv_prepare(c, 1, 1);
    if (rc) {
        /* primitives refused: the kernels are generated here (JIT) */
        nn_dnnl_conv_free(&c);
        if (why && why_len) snprintf(why, why_len, "oneDNN refused the test convolution's primitives (%d)", rc);
        return 0;
    }
    rc = nn_dnnl_conv_forward(c, 0, 1, x, w, b, y);
    if (!rc) rc = nn_dnnl_conv_backward(c, 0, 1, x, w, y, dx, dw, db);
    nn_dnnl_conv_free(&c);
    if (rc) {
        if (why && why_len) snprintf(why, why_len, "oneDNN made the test convolution but running it failed (%d)", rc);
        return -EIO;
    }
    /* y at (o=0, 0, 0): bias + the taps inside the image. */
    float ref = b[0];
    for (int ci = 0; ci < 2; ci++)
        for (int ky = 1; ky < 3; ky++)
            for (int kx = 1; kx < 3; kx++) ref += w[(ci * 3 + ky) * 3 + kx] * x[ci * 36 + (ky - 1) * 6 + (kx - 1)];
    /* The tests' way to see that a wrong result fails (never set in use). */
    const char *wrong = getenv("KFAC_TEST_ONEDNN_WRONG");
    if (wrong && strcmp(wrong, "1") == 0) ref += 1.0f;
    if (y[0] > ref + 1e-3f || y[0] < ref - 1e-3f) {
        if (why && why_len)
            snprintf(why, why_len, "oneDNN's test convolution gave %g where %g is right", (double)y[0], (double)ref);
        return -EIO;
    }
    return 1;
}
