/* tests/nn/test_nn_parse.c — the model text format (common/nn/nn_parse.c): every
 * error is reported as "origin:line: message" (or "origin: message" for
 * whole-file problems) and returns NULL without a crash or a leak (run under
 * ASan/LSan too); defaults, names and routing; the shipped models parse with
 * parameter counts computed here from the layer formulas; the summary
 * table. Tests run from the repository root (models/ is read). */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/nn/nn.h"

/* Parse text and expect failure with a message that starts with prefix
 * (e.g. "t.model:3: ") and contains each of the (NULL-terminated) words. */
static void s_expect_error(const char *text, const char *prefix, ...) {
    char err[512] = "untouched";
    net_t *net = net_parse(text, "t.model", 8, err, sizeof err);
    ck_assert_msg(net == NULL, "expected a parse error for:\n%s", text);
    ck_assert_msg(strncmp(err, prefix, strlen(prefix)) == 0, "message '%s' does not start with '%s' for:\n%s", err,
                  prefix, text);
    va_list ap;
    va_start(ap, prefix);
    for (const char *w = va_arg(ap, const char *); w; w = va_arg(ap, const char *))
        ck_assert_msg(strstr(err, w) != NULL, "message '%s' lacks '%s' for:\n%s", err, w, text);
    va_end(ap);
    ck_assert_msg(strchr(err, '\n') == NULL, "message '%s' spans lines", err);
}

static net_t *s_parse_ok(const char *text) {
    char err[512];
    net_t *net = net_parse(text, "t.model", 4, err, sizeof err);
    ck_assert_msg(net != NULL, "parse failed: %s\n%s", err, text);
    return net;
}

/* Parameter counts from the layer formulas. */
static size_t s_conv_n(int in_c, int out, int k, int bias) { return (size_t)out * in_c * k * k + (bias ? out : 0); }
static size_t s_fc_n(int in, int out, int bias) { return (size_t)out * in + (bias ? out : 0); }
static size_t s_bn_n(int c) { return 2 * (size_t)c; }

START_TEST(test_parse_unknown_layer_names_line) {
    s_expect_error("input 1x4x4\n\nflatten\nconvolution out=3\nsoftmax_xent\n", "t.model:4: ", "unknown layer",
                   "'convolution'", NULL);
    /* comments and blank lines still count as lines */
    s_expect_error("# header\ninput 1x4x4   # the input\n# x\n\nfc out=3\nlinear out=2\n", "t.model:6: ", "unknown layer",
                   "linear", NULL);
    /* CRLF line endings */
    s_expect_error("input 1x4x4\r\nfc out=3\r\nfoo\r\n", "t.model:3: ", "unknown layer", "foo", NULL);
}
END_TEST

START_TEST(test_parse_unknown_option_lists_valid_ones) {
    s_expect_error("input 1x4x4\nfc out=3 bogus=1\nsoftmax_xent\n", "t.model:2: ", "unknown option", "'bogus'", "out",
                   NULL);
    /* from= belongs to add only, eps to batchnorm only */
    s_expect_error("input 1x4x4\nrelu from=input\nfc out=2\nsoftmax_xent\n", "t.model:2: ", "unknown option", "from",
                   NULL);
    s_expect_error("input 1x4x4\nfc out=3 eps=0.1\nsoftmax_xent\n", "t.model:2: ", "unknown option", "eps", NULL);
    s_expect_error("input 1x4x4\nmaxpool global\nfc out=2\nsoftmax_xent\n", "t.model:2: ", "key=value", "global",
                   NULL);
}
END_TEST

START_TEST(test_parse_bad_values) {
    struct { const char *line, *word; } cases[] = {
        {"fc out=abc", "out"},          {"fc out=0", "out"},          {"fc out=3x", "out"},
        {"fc out=", "out"},             {"fc out=-2", "out"},         {"fc out=99999999999999999999", "out"},
        {"fc out=3 bias=2", "bias"},    {"conv out=2 k=0", "'k'"},    {"conv out=2 k=3 stride=0", "stride"},
        {"conv out=2 k=3 pad=-1", "pad"}, {"dropout p=1.5", "'p'"},   {"dropout p=nan", "'p'"},
        {"batchnorm eps=0", "eps"},     {"batchnorm momentum=2", "momentum"},
        {"fc out=3 kfac=kfc", "kfac"},  {"conv out=2 k=3 kfac=doubly", "kfac"}, {"fc out=3 kfac=", "kfac"},
        {"fc out", "key=value"},        {"fc name=a.b out=3", "name"}, {"fc name= out=3", "name"},
        {"fc name=abcdefghijklmnopqrstuvwxyz0123456789 out=3", "name"},
        {"conv out=2 k=3 pad=3", "pad"}, {"maxpool k=2 pad=2", "pad"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[256];
        snprintf(text, sizeof text, "input 1x6x6\n%s\nflatten\nfc out=2\nsoftmax_xent\n", cases[i].line);
        s_expect_error(text, "t.model:2: ", cases[i].word, NULL);
    }
}
END_TEST

START_TEST(test_parse_missing_required_values) {
    s_expect_error("input 1x4x4\nfc\nsoftmax_xent\n", "t.model:2: ", "'out' is required", NULL);
    s_expect_error("input 1x4x4\nconv out=2\nfc out=2\nsoftmax_xent\n", "t.model:2: ", "'k'", "required", NULL);
    s_expect_error("input 1x4x4\nconv k=3\nfc out=2\nsoftmax_xent\n", "t.model:2: ", "'out' is required", NULL);
    s_expect_error("input 1x4x4\nrelu\nadd\nfc out=2\nsoftmax_xent\n", "t.model:3: ", "from=", "required", NULL);
}
END_TEST

START_TEST(test_parse_input_line_missing_or_bad) {
    s_expect_error("fc out=3\nsoftmax_xent\n", "t.model:1: ", "input CxHxW", "'fc'", NULL);
    s_expect_error("\n# comment\nrelu\n", "t.model:3: ", "input CxHxW", NULL);
    const char *bad[] = {"input", "input 1x28", "input 0x28x28", "input 1x28x-1", "input axbxc", "input 1x28x28x",
                         "input 1x28x28 2", "input 5000x1x1", "input 1x1x99999999999",
                         "input 1x28x28x1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[256];
        snprintf(text, sizeof text, "%s\nflatten\nfc out=2\nsoftmax_xent\n", bad[i]);
        s_expect_error(text, "t.model:1: ", "input", NULL);
    }
    /* each dimension is in range but the product does not fit an int */
    s_expect_error("input 4096x4096x4096\nflatten\nfc out=2\nsoftmax_xent\n", "t.model:1: ", "input",
                   "values per example", NULL);
    s_expect_error("input 1x4x4\nrelu\ninput 1x4x4\nfc out=2\nsoftmax_xent\n", "t.model:3: ", "'input'", "only once",
                   NULL);
}
END_TEST

START_TEST(test_parse_init_options) {
    /* bad schemes, on the input line (model-wide) and on a layer, name the allowed ones */
    const char *schemes = "default, he_uniform, he_normal, xavier_uniform or xavier_normal";
    s_expect_error("input 1x4x4 init=kaiming\nfc out=2\nsoftmax_xent\n", "t.model:1: ", "input", "init=kaiming",
                   schemes, NULL);
    s_expect_error("# c\ninput 1x4x4\nfc out=2 init=He_uniform\nsoftmax_xent\n", "t.model:3: ", "fc", "init=He_uniform",
                   schemes, NULL);
    s_expect_error("input 1x4x4\nconv out=2 k=3 init=\nflatten\nfc out=2\nsoftmax_xent\n", "t.model:2: ", "conv",
                   "init=", schemes, NULL);
    s_expect_error("input 1x4x4 bias_init=one\nfc out=2\nsoftmax_xent\n", "t.model:1: ", "bias_init=one",
                   "default or zero", NULL);
    s_expect_error("input 1x4x4\nfc out=2\nfc out=2 bias_init=zeros\nsoftmax_xent\n", "t.model:3: ", "bias_init=zeros",
                   "default or zero", NULL);
    /* other layers keep their own init: init= is not one of their options */
    s_expect_error("input 1x4x4\nbatchnorm init=default\nfc out=2\nsoftmax_xent\n", "t.model:2: ", "unknown option",
                   "'init'", NULL);
    s_expect_error("input 1x4x4 lr=3\nfc out=2\nsoftmax_xent\n", "t.model:1: ", "input", "unknown option", "'lr'",
                   "init bias_init", NULL);
    s_expect_error("input 1x4x4 init\nfc out=2\nsoftmax_xent\n", "t.model:1: ", "input", "key=value", NULL);
    /* good values: the model's, and a layer's over it */
    net_t *net = s_parse_ok("input 1x4x4 init=he_normal bias_init=zero  # c\n"
                            "conv out=2 k=3 init=xavier_uniform\nflatten\nfc out=2 bias_init=default\nsoftmax_xent\n");
    ck_assert_int_eq(net->init, NN_INIT_HE_NORMAL);
    ck_assert_int_eq(net->bias_init, NN_BIAS_INIT_ZERO);
    ck_assert_int_eq(net->layers[0].init, NN_INIT_XAVIER_UNIFORM);
    ck_assert_int_eq(net->layers[0].bias_init, NN_BIAS_INIT_ZERO);
    ck_assert_int_eq(net->layers[2].init, NN_INIT_HE_NORMAL);
    ck_assert_int_eq(net->layers[2].bias_init, NN_BIAS_INIT_DEFAULT);
    net_free(&net);
    net = s_parse_ok("input 1x4x4\nfc out=2\nsoftmax_xent\n");
    ck_assert_int_eq(net->init, NN_INIT_DEFAULT);
    ck_assert_int_eq(net->layers[0].init, NN_INIT_DEFAULT);
    ck_assert_int_eq(net->layers[0].bias_init, NN_BIAS_INIT_DEFAULT);
    ck_assert_str_eq(nn_init_name(NN_INIT_XAVIER_NORMAL), "xavier_normal");
    ck_assert_str_eq(nn_bias_init_name(NN_BIAS_INIT_ZERO), "zero");
    net_free(&net);
}
END_TEST

START_TEST(test_parse_empty_model) {
    s_expect_error("", "t.model: ", "empty model", NULL);
    s_expect_error("# nothing but a comment\n\n   \n", "t.model: ", "empty model", NULL);
}
END_TEST

START_TEST(test_parse_softmax_xent_last_and_present) {
    s_expect_error("input 1x4x4\nfc out=3\nsoftmax_xent\nrelu\n", "t.model:4: ", "softmax_xent", "last", NULL);
    s_expect_error("input 1x4x4\nfc out=3\nrelu\n", "t.model: ", "softmax_xent", "last layer", NULL);
    s_expect_error("input 1x4x4\n", "t.model: ", "softmax_xent", NULL);
    s_expect_error("input 1x1x1\nsoftmax_xent\n", "t.model:2: ", "softmax_xent", "2 classes", NULL);
}
END_TEST

START_TEST(test_parse_kernel_larger_than_input) {
    s_expect_error("input 2x4x5\nconv out=3 k=6\nfc out=2\nsoftmax_xent\n", "t.model:2: ", "conv", "does not fit",
                   "2x4x5", NULL);
    /* padding counts: 4 + 2*1 < 7 does not fit, 4 + 2*2 >= 5 does */
    s_expect_error("input 1x4x4\nconv out=3 k=7 pad=1\nfc out=2\nsoftmax_xent\n", "t.model:2: ", "does not fit", NULL);
    net_t *net = s_parse_ok("input 1x4x4\nconv out=3 k=5 pad=2\nfc out=2\nsoftmax_xent\n");
    ck_assert_int_eq(net->layers[0].h, 4);
    net_free(&net);
    s_expect_error("input 1x4x4\nconv out=2 k=3\nmaxpool k=3\nfc out=2\nsoftmax_xent\n", "t.model:3: ", "maxpool",
                   "does not fit", NULL);
    s_expect_error("input 1x4x4\navgpool k=5\nfc out=2\nsoftmax_xent\n", "t.model:2: ", "avgpool", "does not fit",
                   NULL);
    /* sizes that do not fit an int (2^20 x 2^24 values) are rejected, not wrapped */
    s_expect_error("input 1x4096x4096\nconv out=1048576 k=1\nfc out=2\nsoftmax_xent\n", "t.model:2: ", "conv",
                   "values per example", NULL);
}
END_TEST

START_TEST(test_parse_add_shape_mismatch) {
    s_expect_error("input 1x4x4\nconv name=a out=2 k=3 pad=1\nadd from=input\nfc out=2\nsoftmax_xent\n", "t.model:3: ",
                   "add", "shape mismatch", "2x4x4", "1x4x4", NULL);
    s_expect_error("input 2x4x4\nconv name=a out=2 k=3\nconv name=b out=2 k=3 pad=1 in=input\nadd from=a\n"
                   "fc out=2\nsoftmax_xent\n",
                   "t.model:4: ", "shape mismatch", NULL);
}
END_TEST

START_TEST(test_parse_in_from_name_missing_layer) {
    s_expect_error("input 1x4x4\nrelu in=nope\nfc out=2\nsoftmax_xent\n", "t.model:2: ", "in=nope", "no earlier layer",
                   NULL);
    s_expect_error("input 1x4x4\nrelu name=r\nadd from=ghost\nfc out=2\nsoftmax_xent\n", "t.model:3: ", "from=ghost",
                   NULL);
    /* a later layer is not an earlier layer, nor is the layer itself */
    s_expect_error("input 1x4x4\nrelu in=later\nrelu name=later\nfc out=2\nsoftmax_xent\n", "t.model:2: ", "later",
                   NULL);
    s_expect_error("input 1x4x4\nrelu name=me in=me\nfc out=2\nsoftmax_xent\n", "t.model:2: ", "me", NULL);
}
END_TEST

START_TEST(test_parse_duplicate_name) {
    s_expect_error("input 1x4x4\nfc name=a out=3\nrelu\nfc name=a out=2\nsoftmax_xent\n", "t.model:4: ", "'a'",
                   "already used", NULL);
    /* an explicit name equal to an earlier default name */
    s_expect_error("input 1x4x4\nfc out=3\nrelu name=fc1\nfc out=2\nsoftmax_xent\n", "t.model:3: ", "fc1",
                   "already used", NULL);
    /* a default name equal to an earlier explicit name */
    s_expect_error("input 1x4x4\nrelu name=fc2\nfc out=2\nsoftmax_xent\n", "t.model:3: ", "fc2", "already used",
                   NULL);
    /* 'input' names the network input in in=/from= and cannot name a layer */
    s_expect_error("input 1x4x4\nrelu name=input\nfc out=2\nsoftmax_xent\n", "t.model:2: ", "input", "reserved",
                   NULL);
}
END_TEST

START_TEST(test_parse_too_many_tokens) {
    char text[2048] = "input 1x4x4\nfc out=2";
    for (int i = 0; i < 40; i++) strcat(text, " bias=1");
    strcat(text, "\nsoftmax_xent\n");
    s_expect_error(text, "t.model:2: ", "too many", NULL);
}
END_TEST

START_TEST(test_parse_batch_cap_and_err_buffer) {
    char err[256];
    const char *ok = "input 1x4x4\nfc out=2\nsoftmax_xent\n";
    ck_assert_ptr_null(net_parse(ok, "t.model", 0, err, sizeof err));
    ck_assert_msg(strstr(err, "t.model") && strstr(err, "batch"), "%s", err);
    ck_assert_ptr_null(net_parse(ok, "t.model", -5, err, sizeof err));
    /* a short buffer truncates, a NULL one is allowed */
    char small[10];
    memset(small, 'x', sizeof small);
    ck_assert_ptr_null(net_parse("input 1x4x4\nfoo\n", "t.model", 4, small, sizeof small));
    ck_assert_int_eq(small[sizeof small - 1], 0);
    ck_assert_ptr_null(net_parse("input 1x4x4\nfoo\n", "t.model", 4, NULL, 0));
    /* no text at all */
    ck_assert_ptr_null(net_parse(NULL, "t.model", 4, err, sizeof err));
    ck_assert_msg(strstr(err, "t.model: ") == err && strstr(err, "no model text"), "%s", err);
    /* no origin: a default one names the text */
    ck_assert_ptr_null(net_parse("input 1x4x4\nfoo\n", NULL, 4, err, sizeof err));
    ck_assert_msg(strstr(err, ":2: ") != NULL, "%s", err);
}
END_TEST

static void s_write_file(const char *path, const char *data, size_t len) {
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
}

START_TEST(test_load_missing_file_and_nul_bytes) {
    char err[512];
    ck_assert_ptr_null(net_load("models/no-such-model.model", 4, err, sizeof err));
    ck_assert_msg(strstr(err, "models/no-such-model.model") == err && strstr(err, "cannot open"), "%s", err);
    ck_assert_ptr_null(net_load("models/no-such-model.model", 4, NULL, 0));

    char path[] = "/tmp/kfac-test-nn-parse-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    const char bin[] = "input 1x4x4\nfc out=2\0garbage\nsoftmax_xent\n";
    s_write_file(path, bin, sizeof bin - 1);
    ck_assert_ptr_null(net_load(path, 4, err, sizeof err));
    ck_assert_msg(strncmp(err, path, strlen(path)) == 0 && strstr(err, "NUL"), "%s", err);

    /* net_load reports errors with the path as origin */
    const char bad[] = "input 1x4x4\nfc out=2\nrelu in=zz\nsoftmax_xent\n";
    s_write_file(path, bad, sizeof bad - 1);
    ck_assert_ptr_null(net_load(path, 4, err, sizeof err));
    char want[128];
    snprintf(want, sizeof want, "%s:3: ", path);
    ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "%s", err);

    /* and a good file loads */
    const char good[] = "input 1x4x4\nfc out=2\nsoftmax_xent";
    s_write_file(path, good, sizeof good - 1);
    net_t *net = net_load(path, 4, err, sizeof err);
    ck_assert_msg(net != NULL, "%s", err);
    ck_assert_uint_eq(net->n_params, s_fc_n(16, 2, 1));
    net_free(&net);
    unlink(path);
}
END_TEST

START_TEST(test_parse_defaults_names_and_routing) {
    net_t *net = s_parse_ok("# comment line\n"
                            "input 3x8x6   # trailing comment\n"
                            "\n"
                            "conv name=c1 out=4 k=3 pad=1 kfac=avg\n"
                            "conv out=4 k=3 pad=1 bias=0 kfac=kfc\n"
                            "add name=sum from=c1\n"
                            "maxpool\n"
                            "avgpool k=3 stride=1 pad=1\n"
                            "batchnorm\n"
                            "dropout\n"
                            "tanh\n"
                            "flatten\n"
                            "fc name=f out=5 kfac=doubly\n"
                            "relu name=r\n"
                            "fc out=7 in=f kfac=none\n"
                            "fc out=3 kfac=standard\n"
                            "softmax_xent\n");
    ck_assert_int_eq(net->n_layers, 14);
    ck_assert_int_eq(net->in_c, 3);
    ck_assert_int_eq(net->in_size, 3 * 8 * 6);
    ck_assert_int_eq(net->n_classes, 3);
    const layer_t *L = net->layers;
    /* default names: kind + 1-based layer index */
    ck_assert_str_eq(L[1].name, "conv2");
    ck_assert_str_eq(L[4].name, "avgpool5");
    ck_assert_int_eq(net_find_layer(net, "sum"), 2);
    ck_assert_int_eq(net_find_layer(net, "nope"), -1);
    ck_assert_int_eq(L[0].line, 4);
    ck_assert_int_eq(L[13].line, 17);
    /* routing */
    ck_assert_int_eq(L[0].in, -1);
    ck_assert_int_eq(L[2].in, 1);
    ck_assert_int_eq(L[2].in2, 0);
    ck_assert_int_eq(L[11].in, 9); /* in=f */
    /* options and defaults */
    ck_assert_int_eq(L[0].kfac, KFAC_MODE_AVG);
    ck_assert_int_eq(L[1].kfac, KFAC_MODE_KFC);
    ck_assert_int_eq(L[1].has_bias, 0);
    ck_assert_ptr_null(L[1].bias);
    ck_assert_int_eq(L[0].stride, 1);
    ck_assert_int_eq(L[3].k, 2);
    ck_assert_int_eq(L[3].stride, 2); /* pool stride defaults to k */
    ck_assert_int_eq(L[3].h, 4);
    ck_assert_int_eq(L[3].w, 3);
    ck_assert_int_eq(L[4].h, 4);      /* k=3 stride=1 pad=1 keeps the size */
    ck_assert(L[5].eps == 1e-5f && L[5].momentum == 0.1f);
    ck_assert(L[6].p == 0.5f);
    ck_assert_int_eq(L[8].c, 4 * 4 * 3);
    ck_assert_int_eq(L[9].kfac, KFAC_MODE_DOUBLY);
    ck_assert_int_eq(L[11].kfac, KFAC_MODE_NONE);
    ck_assert_int_eq(L[12].kfac, KFAC_MODE_STANDARD);
    ck_assert_int_eq(L[13].kind, LAYER_SOFTMAX_XENT);
    /* parameter arena layout and views */
    size_t want = s_conv_n(3, 4, 3, 1) + s_conv_n(4, 4, 3, 0) + s_bn_n(4) + s_fc_n(48, 5, 1) + s_fc_n(5, 7, 1) +
                  s_fc_n(7, 3, 1);
    ck_assert_uint_eq(net->n_params, want);
    ck_assert_uint_eq(net->n_state, 2 * 4);
    ck_assert_int_eq(net->n_views, 2 + 1 + 2 + 2 + 2 + 2);
    ck_assert_str_eq(net->views[0].name, "c1.w");
    ck_assert_int_eq(net->views[0].shape[0], 4);
    ck_assert_int_eq(net->views[0].shape[1], 3);
    ck_assert_int_eq(net->views[0].shape[3], 3);
    ck_assert_str_eq(net->views[1].name, "c1.b");
    ck_assert_str_eq(net->views[2].name, "conv2.w");
    ck_assert_str_eq(net->views[3].name, "batchnorm6.gamma");
    ck_assert_str_eq(net->views[4].name, "batchnorm6.beta");
    size_t off = 0;
    for (int v = 0; v < net->n_views; v++) {
        ck_assert_uint_eq(net->views[v].off, off); /* contiguous, in layer order */
        off += net->views[v].n;
    }
    ck_assert_uint_eq(off, net->n_params);
    ck_assert_str_eq(layer_kind_name(LAYER_BATCHNORM), "batchnorm");
    ck_assert_str_eq(layer_kind_name(LAYER_KIND_COUNT), "?");
    /* the net keeps its source text */
    ck_assert_ptr_nonnull(strstr(net->source, "kfac=doubly"));
    net_free(&net);
    ck_assert_ptr_null(net);
    net_free(&net);
    net_free(NULL);
}
END_TEST

START_TEST(test_parse_global_avgpool_and_add_from_input) {
    net_t *net = s_parse_ok("input 2x5x7\nconv out=2 k=3 pad=1\nadd from=input\navgpool global\nfc out=3\nsoftmax_xent\n");
    ck_assert_int_eq(net->layers[1].in2, -1);
    ck_assert_int_eq(net->layers[2].c, 2);
    ck_assert_int_eq(net->layers[2].h, 1);
    ck_assert_int_eq(net->layers[2].w, 1);
    net_free(&net);
    net = s_parse_ok("input 2x5x7\navgpool global=1\nfc out=3\nsoftmax_xent\n");
    ck_assert_int_eq(net->layers[0].global, 1);
    net_free(&net);
}
END_TEST

typedef struct shipped {
    const char *path;
    size_t n_params;
    int n_classes;
} shipped_t;

START_TEST(test_shipped_models_parse_with_expected_counts) {
    /* counts from the layer formulas, shapes worked out by hand */
    const shipped_t models[] = {
        /* 784 -> 256 -> 128 -> 10 */
        {"models/mnist-mlp.model", s_fc_n(784, 256, 1) + s_fc_n(256, 128, 1) + s_fc_n(128, 10, 1), 10},
        /* conv 1->16 5x5, conv 16->32 5x5, 32x7x7 -> 128 -> 10 */
        {"models/mnist-cnn.model",
         s_conv_n(1, 16, 5, 1) + s_conv_n(16, 32, 5, 1) + s_fc_n(32 * 7 * 7, 128, 1) + s_fc_n(128, 10, 1), 10},
        /* conv 1->32 5x5, conv 32->64 5x5, 64x7x7 -> 1024 -> 10 */
        {"models/mnist-cnn-wide.model",
         s_conv_n(1, 32, 5, 1) + s_conv_n(32, 64, 5, 1) + s_fc_n(64 * 7 * 7, 1024, 1) + s_fc_n(1024, 10, 1), 10},
        /* conv 1->4 3x3 (40), conv 4->4 3x3 (148), 4x12x12 = 576 -> 64 (36928) -> 10 (650) */
        {"models/small-cnn.model",
         s_conv_n(1, 4, 3, 1) + s_conv_n(4, 4, 3, 1) + s_fc_n(576, 64, 1) + s_fc_n(64, 10, 1), 10},
        /* stem conv 3->16 + bn; stage 1: two 16->16 convs + bn (identity
         * shortcut); stages 2, 3: c->2c stride-2 conv, 2c->2c conv, 1x1 c->2c
         * projection, each with bn; global avgpool; fc 64 -> 10. Convs
         * before bn have no bias. */
        {"models/resnet8-cifar.model",
         s_conv_n(3, 16, 3, 0) + s_bn_n(16) + 2 * (s_conv_n(16, 16, 3, 0) + s_bn_n(16)) + s_conv_n(16, 32, 3, 0) +
             s_conv_n(32, 32, 3, 0) + s_conv_n(16, 32, 1, 0) + 3 * s_bn_n(32) + s_conv_n(32, 64, 3, 0) +
             s_conv_n(64, 64, 3, 0) + s_conv_n(32, 64, 1, 0) + 3 * s_bn_n(64) + s_fc_n(64, 10, 1),
         10},
    };
    ck_assert_uint_eq(models[3].n_params, 40 + 148 + 36928 + 650);
    ck_assert_uint_eq(models[4].n_params, 78042);
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        char err[512];
        net_t *net = net_load(models[i].path, 2, err, sizeof err);
        ck_assert_msg(net != NULL, "%s", err);
        ck_assert_msg(net->n_params == models[i].n_params, "%s: %zu parameters, expected %zu", models[i].path,
                      net->n_params, models[i].n_params);
        ck_assert_int_eq(net->n_classes, models[i].n_classes);
        net_free(&net);
    }
}
END_TEST

START_TEST(test_resnet8_shapes) {
    char err[512];
    net_t *net = net_load("models/resnet8-cifar.model", 2, err, sizeof err);
    ck_assert_msg(net != NULL, "%s", err);
    ck_assert_int_eq(net->in_c, 3);
    ck_assert_int_eq(net->in_h, 32);
    int n_add = 0, n_proj = 0;
    for (int i = 0; i < net->n_layers; i++) {
        const layer_t *l = &net->layers[i];
        if (l->kind == LAYER_ADD) n_add++;
        if (l->kind == LAYER_CONV && l->k == 1) {
            n_proj++;
            ck_assert_int_eq(l->stride, 2);
        }
    }
    ck_assert_int_eq(n_add, 3);
    ck_assert_int_eq(n_proj, 2);
    /* the map before global pooling is 64x8x8 */
    const layer_t *fc = &net->layers[net->n_layers - 2];
    ck_assert_int_eq(fc->kind, LAYER_FC);
    const layer_t *pool = &net->layers[fc->in];
    ck_assert_int_eq(pool->kind, LAYER_AVGPOOL);
    ck_assert_int_eq(pool->in_c, 64);
    ck_assert_int_eq(pool->in_h, 8);
    ck_assert_int_eq(pool->in_w, 8);
    net_free(&net);
}
END_TEST

START_TEST(test_summary_lists_layers_and_total) {
    char err[512];
    net_t *net = net_load("models/small-cnn.model", 2, err, sizeof err);
    ck_assert_msg(net != NULL, "%s", err);
    FILE *f = tmpfile();
    ck_assert_ptr_nonnull(f);
    net_print_summary(net, f);
    long len = ftell(f);
    ck_assert_int_gt(len, 0);
    char *buf = calloc((size_t)len + 1, 1);
    ck_assert_ptr_nonnull(buf);
    rewind(f);
    ck_assert_uint_eq(fread(buf, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    for (int i = 0; i < net->n_layers; i++)
        ck_assert_msg(strstr(buf, net->layers[i].name) != NULL, "summary lacks layer %s:\n%s", net->layers[i].name, buf);
    ck_assert_msg(strstr(buf, "conv1") && strstr(buf, "fc2") && strstr(buf, "softmax_xent"), "%s", buf);
    ck_assert_msg(strstr(buf, "total parameters: 37766") != NULL, "summary lacks the total:\n%s", buf);
    ck_assert_msg(strstr(buf, "36928") != NULL, "summary lacks fc1's count:\n%s", buf);
    /* one header, one row for the input, one per layer, the total */
    int lines = 0;
    for (const char *c = buf; *c; c++) lines += *c == '\n';
    ck_assert_msg(lines == net->n_layers + 3, "summary has %d lines, expected %d:\n%s", lines, net->n_layers + 3, buf);
    free(buf);
    net_free(&net);
}
END_TEST

/* The text of the first ``` block after the line `heading` in models/README.md
 * (caller frees). */
static char *s_readme_block(const char *heading) {
    FILE *f = fopen("models/README.md", "rb");
    ck_assert_msg(f != NULL, "cannot open models/README.md (run from the repository root)");
    char *doc = calloc(1 << 16, 1);
    ck_assert_ptr_nonnull(doc);
    size_t len = fread(doc, 1, (1 << 16) - 1, f);
    fclose(f);
    doc[len] = 0;
    const char *h = strstr(doc, heading);
    ck_assert_msg(h != NULL, "models/README.md lacks '%s'", heading);
    const char *start = strstr(h, "```\n");
    ck_assert_ptr_nonnull(start);
    start += 4;
    const char *end = strstr(start, "```");
    ck_assert_ptr_nonnull(end);
    char *block = strndup(start, (size_t)(end - start));
    free(doc);
    return block;
}

START_TEST(test_readme_examples_parse) {
    /* the opening example is a whole model */
    char *mlp = s_readme_block("# Model descriptions");
    net_t *net = s_parse_ok(mlp);
    ck_assert_uint_eq(net->n_params, s_fc_n(784, 256, 1) + s_fc_n(256, 128, 1) + s_fc_n(128, 10, 1));
    net_free(&net);
    free(mlp);
    /* the residual block, completed into a model */
    char *block = s_readme_block("## Residual blocks");
    char text[4096];
    snprintf(text, sizeof text, "input 16x32x32\n%savgpool global\nfc out=10\nsoftmax_xent\n", block);
    free(block);
    net = s_parse_ok(text);
    const int add = net_find_layer(net, "b_add");
    ck_assert_int_ge(add, 0);
    const layer_t *l = &net->layers[add];
    ck_assert_int_eq(l->c, 32);
    ck_assert_int_eq(l->h, 16);
    ck_assert_int_eq(l->in, net_find_layer(net, "b_proj_bn"));
    ck_assert_int_eq(l->in2, net_find_layer(net, "b_b_bn"));
    ck_assert_int_eq(net->layers[net_find_layer(net, "b_proj")].in, net_find_layer(net, "block_in"));
    ck_assert_uint_eq(net->n_params, s_conv_n(16, 32, 3, 0) + s_conv_n(32, 32, 3, 0) + s_conv_n(16, 32, 1, 0) +
                                         3 * s_bn_n(32) + s_fc_n(32, 10, 1));
    net_free(&net);
    /* the init example, completed into a model: the layer's init= wins */
    char *init = s_readme_block("## Initialization");
    snprintf(text, sizeof text, "%sflatten\nfc out=10\nsoftmax_xent\n", init);
    free(init);
    net = s_parse_ok(text);
    ck_assert_int_eq(net->layers[0].init, NN_INIT_DEFAULT);
    ck_assert_int_eq(net->layers[0].bias_init, NN_BIAS_INIT_ZERO);
    ck_assert_int_eq(net->layers[2].init, NN_INIT_HE_UNIFORM);
    net_free(&net);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("nn_parse");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_parse_unknown_layer_names_line);
    tcase_add_test(tc, test_parse_unknown_option_lists_valid_ones);
    tcase_add_test(tc, test_parse_bad_values);
    tcase_add_test(tc, test_parse_missing_required_values);
    tcase_add_test(tc, test_parse_input_line_missing_or_bad);
    tcase_add_test(tc, test_parse_init_options);
    tcase_add_test(tc, test_parse_empty_model);
    tcase_add_test(tc, test_parse_softmax_xent_last_and_present);
    tcase_add_test(tc, test_parse_kernel_larger_than_input);
    tcase_add_test(tc, test_parse_add_shape_mismatch);
    tcase_add_test(tc, test_parse_in_from_name_missing_layer);
    tcase_add_test(tc, test_parse_duplicate_name);
    tcase_add_test(tc, test_parse_too_many_tokens);
    tcase_add_test(tc, test_parse_batch_cap_and_err_buffer);
    tcase_add_test(tc, test_load_missing_file_and_nul_bytes);
    tcase_add_test(tc, test_parse_defaults_names_and_routing);
    tcase_add_test(tc, test_parse_global_avgpool_and_add_from_input);
    tcase_add_test(tc, test_shipped_models_parse_with_expected_counts);
    tcase_add_test(tc, test_resnet8_shapes);
    tcase_add_test(tc, test_summary_lists_layers_and_total);
    tcase_add_test(tc, test_readme_examples_parse);
    suite_add_tcase(s, tc);
    return s;
}
