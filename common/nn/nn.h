/* common/nn/nn.h — the CPU neural-network core: layers, networks, forward and
 * backward passes.
 *
 * Conventions
 *   - float32, row-major. Activations are NCHW: a layer's output for a batch
 *     of n examples is y (n, c, h, w); fully connected outputs have h = w = 1.
 *   - A network is a list of layers in topological order. Each layer reads
 *     the output of layer `in` (default: the previous layer; -1 is the network
 *     input); `add` also reads `in2`. Residual blocks are described with
 *     names, see models/README.md.
 *   - All trainable parameters live in one flat arena `params` (n_params
 *     floats) with a gradient arena `grads` of the same layout; each layer's
 *     w/b point into them (named views in net->views). The flat layout is what
 *     travels on the wire and what optimizers update.
 *   - Non-trained state (batch-norm running statistics) lives in a second
 *     flat arena `state` (n_state floats).
 *   - Loss is the mean over the batch. Backward writes d(loss)/d(output) of
 *     every layer into its dy, so the per-example gradient w.r.t. a layer's
 *     output is n * dy[i]. What K-FAC needs per weighted layer:
 *       fc:    input a = net_layer_input(net, l)  (n, in)   and dy (n, out);
 *       conv:  patches l->cols (in_c*k*k, n*oh*ow) (row (c, ky, kx), column
 *              (example, position); kept by the forward pass) and dy (n, out, oh, ow);
 *       bn:    l->xhat (n, c, h, w) normalized input and dy.
 *   - Fan-out is allowed: backward *adds* into the input's dy; net_backward
 *     zeroes every dy first.
 *
 * Ownership: the net owns every buffer; layer pointers are views into it and
 * stay valid until net_free(). Not thread-safe: one thread per net (which
 * may hand each pass to the net's own threads, net_set_threads).
 */
#ifndef KFAC_NN_H
#define KFAC_NN_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    LAYER_FC = 0,
    LAYER_CONV,
    LAYER_RELU,
    LAYER_TANH,
    LAYER_MAXPOOL,
    LAYER_AVGPOOL,
    LAYER_FLATTEN,
    LAYER_DROPOUT,
    LAYER_BATCHNORM,
    LAYER_ADD,
    LAYER_SOFTMAX_XENT,
    LAYER_KIND_COUNT
} layer_kind_t;

/* How K-FAC approximates a weighted layer's Fisher block (model option
 * kfac=...). */
typedef enum {
    KFAC_MODE_DEFAULT = 0, /* fc: standard, or doubly above the width threshold; conv: kfc */
    KFAC_MODE_STANDARD,    /* fc: A = E[[a;1][a;1]^T], G = E[g g^T] */
    KFAC_MODE_DOUBLY,      /* fc on a feature map: Ba et al. sec. 4 three factors */
    KFAC_MODE_KFC,         /* conv: Grosse & Martens KFC factors from patches */
    KFAC_MODE_AVG,         /* conv: spatially averaged factors, Ba et al. App. A */
    KFAC_MODE_NONE,        /* not preconditioned (plain gradient) */
} kfac_mode_t;

/* How fc and conv weights are drawn (model option init=, on the input line
 * for the whole model or on a layer; models/README.md). fan_in = in (fc) or
 * in_c*k*k (conv); fan_out = out (fc) or out*k*k (conv). */
typedef enum {
    NN_INIT_DEFAULT = 0,    /* U(-1/sqrt(fan_in), 1/sqrt(fan_in)), the usual framework default */
    NN_INIT_HE_UNIFORM,     /* U(-sqrt(6/fan_in), sqrt(6/fan_in)) */
    NN_INIT_HE_NORMAL,      /* N(0, 2/fan_in) */
    NN_INIT_XAVIER_UNIFORM, /* U(-sqrt(6/(fan_in+fan_out)), +) */
    NN_INIT_XAVIER_NORMAL,  /* N(0, 2/(fan_in+fan_out)) */
    NN_INIT_COUNT
} nn_init_t;

/* How fc and conv biases are drawn (model option bias_init=). */
typedef enum {
    NN_BIAS_INIT_DEFAULT = 0, /* U(-1/sqrt(fan_in), 1/sqrt(fan_in)), whatever init= says */
    NN_BIAS_INIT_ZERO,        /* 0, and no random draw */
    NN_BIAS_INIT_COUNT
} nn_bias_init_t;

/* Which code runs the conv layers on the CPU (net_set_conv_engine). */
typedef enum {
    NN_CONV_ENGINE_BLAS = 0, /* im2col + OpenBLAS sgemm (nn.c): the reference, and a new net's engine */
    NN_CONV_ENGINE_ONEDNN,   /* oneDNN direct convolutions (nn_dnnl.c) for every conv layer */
    NN_CONV_ENGINE_AUTO,     /* per layer shape, the faster of the two by nn_conv_engine_pick */
    NN_CONV_ENGINE_COUNT
} nn_conv_engine_t;

/* "default", "he_uniform", ... ("?" out of range); for messages and docs. */
const char *nn_init_name(nn_init_t init);
const char *nn_bias_init_name(nn_bias_init_t bias_init);

#define NN_NAME_MAX 32

typedef struct layer {
    layer_kind_t kind;
    char name[NN_NAME_MAX];
    int index;
    int in;                 /* input layer index, -1 = network input */
    int in2;                /* add: second input layer index */
    int in_c, in_h, in_w;   /* input shape per example */
    int c, h, w;            /* output shape per example */
    int size;               /* c * h * w */
    int line;               /* line in the model file (for messages) */

    /* options */
    int out;                /* fc: outputs; conv: output channels */
    int k, stride, pad;     /* conv / pool kernel, stride, padding */
    int global;             /* avgpool over the whole map */
    float p;                /* dropout drop probability */
    float eps, momentum;    /* batchnorm: variance epsilon, running-stat momentum */
    kfac_mode_t kfac;       /* weighted layers: approximation used */
    int has_bias;           /* fc/conv: 1 unless bias=0 */
    nn_init_t init;         /* fc/conv: weight scheme (the layer's init=, else the model's) */
    nn_bias_init_t bias_init; /* fc/conv: bias scheme (the layer's bias_init=, else the model's) */

    /* parameters: views into net->params and net->grads */
    float *weight;  /* fc: (out, in); conv: (out, in_c*k*k); bn: gamma (c) */
    float *bias;    /* fc/conv: (out); bn: beta (c); NULL when no bias */
    float *dweight, *dbias; /* gradients, same shapes */
    size_t w_off, n_w, b_off, n_b; /* offsets/counts in the params arena */
    float *run_mean, *run_var;     /* bn: views into net->state, (c) each */

    /* buffers, sized for net->batch_cap examples */
    float *y;     /* (n, c, h, w) output */
    float *dy;    /* (n, c, h, w) d loss / d output */
    float *cols;  /* conv: (in_c*k*k, n*oh*ow) patches (im2col; row (c, ky, kx), column (example, position));
                     current for cols_n examples: net_conv_patches fills them on demand */
    int cols_n;   /* conv: examples of the current pass whose patches are in cols; 0: stale */
    struct nn_dnnl_conv *dnnl; /* conv: the oneDNN engine (owned), NULL: im2col + OpenBLAS */
    float *dcols; /* conv: scratch, same shape as cols */
    float *tmp;   /* conv: (out, n*oh*ow) output / output gradient, channel-major */
    int32_t *argmax; /* maxpool: (n, c, h, w) index into the input example */
    float *mask;  /* dropout: (n, c, h, w) 0 or 1/(1-p) */
    float *xhat;  /* bn: (n, c, h, w) normalized input */
    float *bmean, *binvstd; /* bn: (c) batch mean and 1/sqrt(var+eps) */
    float *probs; /* softmax_xent: (n, classes) */
} layer_t;

typedef struct net_view {
    char name[NN_NAME_MAX + 8]; /* "conv1.w" */
    size_t off, n;
    int shape[4];               /* unused dims are 0 */
} net_view_t;

typedef struct net {
    int n_layers;
    layer_t *layers;
    int in_c, in_h, in_w;   /* input shape per example */
    int in_size;
    int n_classes;
    int batch_cap;          /* buffers hold this many examples */
    int batch_n;            /* examples in the current forward pass */
    int train;              /* 1: dropout active, bn uses batch statistics */
    const float *x;         /* borrowed: the current input (batch_n, in_size) */

    size_t n_params;
    float *params;          /* (n_params) */
    float *grads;           /* (n_params) */
    size_t n_state;
    float *state;           /* (n_state) batch-norm running statistics */
    int n_views;
    net_view_t *views;
    uint64_t dropout_seed;  /* advanced every training forward pass */
    double fc_doubly_min_in; /* fc with kfac=default above this input width and a feature-map input becomes doubly */
    nn_init_t init;          /* the model's init= (input line); layers may override */
    nn_bias_init_t bias_init; /* the model's bias_init= (input line); layers may override */
    char *source;           /* the model text the net was built from (owned) */
    struct nn_par *par;     /* net_set_threads: the pool (owned), NULL for one thread */
    float *par_scratch;     /* (threads - 1, par_scratch_stride) conv weight-gradient shares */
    size_t par_scratch_stride; /* largest conv n_w + n_b */
} net_t;

/* Parse a model description (see models/README.md) and build a network
 * with buffers for batch_cap examples. `origin` names the text in messages
 * (file name). On error returns NULL and writes "origin:line: message" into
 * err (err_len bytes). The returned net owns a copy of text. */
net_t *net_parse(const char *text, const char *origin, int batch_cap, char *err, size_t err_len);

/* Read a model file and net_parse() it. */
net_t *net_load(const char *path, int batch_cap, char *err, size_t err_len);

/* Free everything; NULL is a no-op and *net_p is set to NULL. */
void net_free(net_t **net_p);

/* Print the summary table (layer, kind, output shape, parameters) to f
 * (a FILE *; void * keeps stdio out of this header). */
void net_print_summary(const net_t *net, void *f);

/* Run forward and backward passes on n_threads threads (>= 1; the caller's
 * thread is one of them): each layer is split over the examples of the
 * batch (nn.c). The threads call sgemm themselves, so the program should
 * give OpenBLAS one thread (blas_set_threads(1)) while the net has several.
 * Results depend on the thread count only through the order in which conv
 * weight gradients are summed. Returns 0, -EINVAL or -ENOMEM (the net then
 * runs on one thread). Not while a pass runs. */
int net_set_threads(net_t *net, int n_threads);

/* Threads of the net's passes (1 unless net_set_threads said otherwise). */
int net_threads(const net_t *net);

/* Choose the engine of every conv layer (a new net uses NN_CONV_ENGINE_BLAS).
 * ONEDNN: oneDNN for each conv layer, or -ENOTSUP with the reason in err
 * (err_len bytes) when oneDNN cannot run here (nn_dnnl_probe; the layers
 * then stay on OpenBLAS). AUTO: each layer by nn_conv_engine_pick, a rule
 * from the measurement in bench/RESULTS.md ("oneDNN"), so that two runs of
 * the same build and model always take the same path; where oneDNN cannot
 * run, OpenBLAS with one warning. BLAS: OpenBLAS everywhere. The engines
 * differ in float rounding only (tests/nn/test_nn_dnnl.c). ONEDNN and AUTO
 * both return -EIO (why in err) when oneDNN runs but its probe's result is
 * wrong. Logs one info line per conv layer on oneDNN. Not while a pass
 * runs. Returns 0, -EINVAL, -ENOMEM, -ENOTSUP or -EIO. */
int net_set_conv_engine(net_t *net, nn_conv_engine_t engine, char *err, size_t err_len);

/* The AUTO rule for conv layer l: NN_CONV_ENGINE_ONEDNN or _BLAS. */
nn_conv_engine_t nn_conv_engine_pick(const layer_t *l);

/* Conv layers of the net on oneDNN. */
int net_conv_onednn_layers(const net_t *net);

/* "blas", "onednn", "auto" (NULL out of range) and the parser (0 or -EINVAL). */
const char *nn_conv_engine_name(nn_conv_engine_t engine);
int nn_conv_engine_parse(const char *s, nn_conv_engine_t *out);

/* Make conv layer l's patches l->cols current for the last forward pass
 * (the oneDNN engine does not form them; K-FAC's conv statistics read them).
 * Cheap when they already are. Returns 0 or -EINVAL. */
int net_conv_patches(net_t *net, layer_t *l);

/* Initialize parameters and state from the seed. Deterministic. One stream
 * drawn in layer order; for each fc/conv layer its weights (row-major, by
 * its init scheme) and then its biases (bias_init default: U(-1/sqrt(fan_in),
 * +); zero: no draws). Batchnorm: gamma 1, beta 0, running mean 0, running
 * variance 1 (no draws). init=he_uniform with bias_init=zero draws exactly
 * what this function drew before init= existed (He-uniform weights, zero
 * biases), bit for bit. */
void net_init_params(net_t *net, uint64_t seed);

/* Forward pass on n <= batch_cap examples x (n, in_size), borrowed until the
 * next call. train selects dropout and batch statistics. Returns 0 or
 * -EINVAL (n out of range). The logits are net_logits(net) (n, n_classes). */
int net_forward(net_t *net, const float *x, int n, int train);

/* Loss and backward pass after net_forward. Exactly one of labels (n) or
 * soft (n, n_classes) rows summing to 1 is non-NULL. Zeros grads and every dy,
 * then fills them. Returns the mean loss; *n_correct (may be NULL) receives
 * the number of argmax hits (hard labels only). */
float net_backward(net_t *net, const int *labels, const float *soft, int *n_correct);

/* Mean loss and hits of the last forward pass without a backward pass. */
float net_loss(net_t *net, const int *labels, const float *soft, int *n_correct);

/* Logits of the last forward pass: (batch_n, n_classes), borrowed. */
const float *net_logits(const net_t *net);

/* Softmax probabilities of the last forward pass (computed by net_loss /
 * net_backward, or on demand here): (batch_n, n_classes), borrowed. */
const float *net_probs(net_t *net);

/* The input activations of layer l for the current batch: (batch_n, in_size
 * of l), borrowed. */
const float *net_layer_input(const net_t *net, const layer_t *l);

/* Evaluate on a whole set in chunks of batch_cap: mean loss and accuracy.
 * x (n, in_size), labels (n). Eval mode. */
void net_evaluate(net_t *net, const float *x, const int *labels, int n, double *loss, double *acc);

/* Layer kind name ("fc", "conv", ...) and lookup by name (-1 if none). */
const char *layer_kind_name(layer_kind_t kind);
int net_find_layer(const net_t *net, const char *name);

/* Is the layer one K-FAC preconditions (fc, conv, batchnorm)? */
static inline int layer_has_params(const layer_t *l) {
    return l->kind == LAYER_FC || l->kind == LAYER_CONV || l->kind == LAYER_BATCHNORM;
}

#endif
