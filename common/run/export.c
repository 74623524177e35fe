/* common/run/export.c — see export.h. */
#include "common/run/export.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/textbuf.h"

int export_npy_header(uint64_t n, uint8_t *buf, size_t len) {
    char dict[128];
    int d = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (%" PRIu64 ",), }", n);
    if (d < 0 || (size_t)d >= sizeof dict) return -ENOSPC;
    /* magic (6) + version (2) + header length (2) + dict + spaces + '\n' */
    size_t total = 10 + (size_t)d + 1;
    total = (total + EXPORT_NPY_ALIGN - 1) / EXPORT_NPY_ALIGN * EXPORT_NPY_ALIGN;
    if (total > len) return -ENOSPC;
    size_t hlen = total - 10;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = 1; /* major */
    buf[7] = 0; /* minor */
    buf[8] = (uint8_t)(hlen & 0xff); /* uint16, little-endian */
    buf[9] = (uint8_t)(hlen >> 8);
    memcpy(buf + 10, dict, (size_t)d);
    memset(buf + 10 + d, ' ', hlen - (size_t)d - 1);
    buf[total - 1] = '\n';
    return (int)total;
}

uint8_t *export_npy_f32(const float *x, uint64_t n, size_t *n_bytes) {
    uint8_t head[256];
    int h = export_npy_header(n, head, sizeof head);
    if (h < 0 || n > (SIZE_MAX - (size_t)h) / 4) return NULL;
    size_t total = (size_t)h + (size_t)n * 4;
    uint8_t *buf = malloc(total ? total : 1);
    if (!buf) return NULL;
    memcpy(buf, head, (size_t)h);
    uint8_t *p = buf + h;
    for (uint64_t i = 0; i < n; i++) {
        /* little-endian whatever the host's order */
        uint32_t u;
        memcpy(&u, &x[i], 4);
        p[4 * i] = (uint8_t)u;
        p[4 * i + 1] = (uint8_t)(u >> 8);
        p[4 * i + 2] = (uint8_t)(u >> 16);
        p[4 * i + 3] = (uint8_t)(u >> 24);
    }
    *n_bytes = total;
    return buf;
}

/* text as a JSON string (RFC 8259: quote, backslash and control characters
 * escaped). */
static void s_put_string(textbuf_t *b, const char *text) {
    textbuf_printf(b, "\"");
    for (const unsigned char *p = (const unsigned char *)(text ? text : ""); *p; p++) {
        if (*p == '"') textbuf_printf(b, "\\\"");
        else if (*p == '\\') textbuf_printf(b, "\\\\");
        else if (*p == '\n') textbuf_printf(b, "\\n");
        else if (*p == '\t') textbuf_printf(b, "\\t");
        else if (*p == '\r') textbuf_printf(b, "\\r");
        else if (*p < 0x20) textbuf_printf(b, "\\u%04x", *p);
        else textbuf_printf(b, "%c", *p);
    }
    textbuf_printf(b, "\"");
}

/* A finite double as JSON (NaN and infinities have no JSON form: null). */
static void s_put_number(textbuf_t *b, double v) {
    if (v == v && v - v == 0.0) textbuf_printf(b, "%.9g", v);
    else textbuf_printf(b, "null");
}

static void s_put_param(textbuf_t *b, const char *name, const int *shape, int n_dims, size_t off, size_t count,
                        int first) {
    textbuf_printf(b, "%s{\"name\": \"%s\", \"shape\": [", first ? "" : ", ", name);
    for (int i = 0; i < n_dims; i++) textbuf_printf(b, "%s%d", i ? ", " : "", shape[i]);
    textbuf_printf(b, "], \"offset\": %zu, \"count\": %zu}", off, count);
}

char *export_manifest_json(const net_t *net, const export_info_t *info) {
    textbuf_t b = {0};
    textbuf_printf(&b, "{\n  \"format\": \"kfac-weights\",\n  \"version\": 1,\n  \"program\": ");
    s_put_string(&b, info->program ? info->program : "kfac");
    textbuf_printf(&b, ",\n  \"step\": %" PRIu64 ",\n  \"dtype\": \"float32\",\n", info->step);
    textbuf_printf(&b, "  \"n_params\": %zu,\n  \"n_state\": %zu,\n", net->n_params, net->n_state);
    textbuf_printf(&b, "  \"files\": {\"params\": \"params.npy\", \"params_polyak\": \"params_polyak.npy\", \"state\": %s},\n",
          net->n_state ? "\"state.npy\"" : "null");
    textbuf_printf(&b, "  \"input\": [%d, %d, %d],\n  \"n_classes\": %d,\n", net->in_c, net->in_h, net->in_w, net->n_classes);
    dataset_norm_t norm;
    textbuf_printf(&b, "  \"dataset\": ");
    s_put_string(&b, info->dataset ? info->dataset : "");
    textbuf_printf(&b, ",\n");
    int have_norm = 0;
    if (info->norm) norm = *info->norm, have_norm = 1;
    else have_norm = info->dataset && dataset_norm_lookup(info->dataset, &norm) == 0;
    if (have_norm) {
        /* the input the parameters were trained on: x = (v - mean[c]) / std[c], v = byte / 255 for uint8
         * images (built-in sets, IDX, uint8 .npy), the value itself for float32 .npy */
        textbuf_printf(&b, "  \"input_normalization\": {\"mean\": [");
        for (int c = 0; c < norm.c; c++) textbuf_printf(&b, "%s%.9g", c ? ", " : "", (double)norm.mean[c]);
        textbuf_printf(&b, "], \"std\": [");
        for (int c = 0; c < norm.c; c++) textbuf_printf(&b, "%s%.9g", c ? ", " : "", (double)norm.std[c]);
        textbuf_printf(&b, "]},\n");
    }
    textbuf_printf(&b, "  \"final\": {\"step\": %" PRIu64 ", \"test_examples\": %d, \"test_loss\": ", info->eval_step,
          info->eval_n);
    s_put_number(&b, info->test_loss);
    textbuf_printf(&b, ", \"test_acc\": ");
    s_put_number(&b, info->test_acc);
    textbuf_printf(&b, ", \"polyak_loss\": ");
    s_put_number(&b, info->polyak_loss);
    textbuf_printf(&b, ", \"polyak_acc\": ");
    s_put_number(&b, info->polyak_acc);
    textbuf_printf(&b, "},\n  \"layers\": [\n");
    for (int i = 0; i < net->n_layers; i++) {
        const layer_t *l = &net->layers[i];
        textbuf_printf(&b, "    {\"name\": ");
        s_put_string(&b, l->name);
        textbuf_printf(&b, ", \"kind\": \"%s\", \"output\": [%d, %d, %d], \"params\": [", layer_kind_name(l->kind), l->c, l->h,
              l->w);
        int in_size = l->in_c * l->in_h * l->in_w;
        if (l->kind == LAYER_FC) {
            int ws[2] = {l->out, in_size}, bs[1] = {l->out};
            s_put_param(&b, "w", ws, 2, l->w_off, l->n_w, 1);
            if (l->n_b) s_put_param(&b, "b", bs, 1, l->b_off, l->n_b, 0);
        } else if (l->kind == LAYER_CONV) {
            int ws[4] = {l->out, l->in_c, l->k, l->k}, bs[1] = {l->out};
            s_put_param(&b, "w", ws, 4, l->w_off, l->n_w, 1);
            if (l->n_b) s_put_param(&b, "b", bs, 1, l->b_off, l->n_b, 0);
        } else if (l->kind == LAYER_BATCHNORM) {
            int cs[1] = {l->c};
            s_put_param(&b, "gamma", cs, 1, l->w_off, l->n_w, 1);
            s_put_param(&b, "beta", cs, 1, l->b_off, l->n_b, 0);
            textbuf_printf(&b, "], \"state\": [");
            /* offsets into net->state, from the layer's own views */
            s_put_param(&b, "run_mean", cs, 1, (size_t)(l->run_mean - net->state), (size_t)l->c, 1);
            s_put_param(&b, "run_var", cs, 1, (size_t)(l->run_var - net->state), (size_t)l->c, 0);
        }
        textbuf_printf(&b, "]}%s\n", i + 1 < net->n_layers ? "," : "");
    }
    textbuf_printf(&b, "  ],\n  \"model\": ");
    s_put_string(&b, net->source);
    textbuf_printf(&b, "\n}\n");
    if (b.failed) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

static int s_write_npy(const rundir_t *d, const char *name, const float *x, uint64_t n, char *err, size_t err_len) {
    size_t n_bytes = 0;
    uint8_t *buf = export_npy_f32(x, n, &n_bytes);
    if (!buf) {
        snprintf(err, err_len, "out of memory writing %s/%s", rundir_path(d), name);
        return -ENOMEM;
    }
    int rc = rundir_write_file(d, name, buf, n_bytes);
    free(buf);
    if (rc < 0) snprintf(err, err_len, "cannot write %s/%s: %s", rundir_path(d), name, strerror(-rc));
    return rc;
}

int export_write(const rundir_t *d, const net_t *net, const float *params, const float *polyak, const float *state,
                 const export_info_t *info, char *err, size_t err_len) {
    int rc = s_write_npy(d, "params.npy", params, net->n_params, err, err_len);
    if (rc == 0) rc = s_write_npy(d, "params_polyak.npy", polyak ? polyak : params, net->n_params, err, err_len);
    if (rc == 0 && net->n_state)
        rc = s_write_npy(d, "state.npy", state ? state : net->state, net->n_state, err, err_len);
    if (rc < 0) return rc;
    char *json = export_manifest_json(net, info);
    if (!json) {
        snprintf(err, err_len, "out of memory writing %s/manifest.json", rundir_path(d));
        return -ENOMEM;
    }
    rc = rundir_write_text(d, "manifest.json", json);
    free(json);
    if (rc < 0) snprintf(err, err_len, "cannot write %s/manifest.json: %s", rundir_path(d), strerror(-rc));
    return rc;
}
