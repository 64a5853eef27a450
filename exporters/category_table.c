/* The "by category at the peak" table: the tensors' categories (compact/categories.c), then what
 * is outside the allocator's tensors, adding up to the process total; beside each line the
 * textbook estimate of training memory and the difference, explained.
 *
 * The textbook: weights W + gradients W + optimizer state (Adam/AdamW 2W, SGD with momentum W) +
 * activations + the CUDA context. W is the parameter bytes measured at the peak (blocks of the
 * caching allocator, module buffers included); activations and the context are taken as measured.
 * Fine-tuning trains part of W: where a backward pass ended and each gradient after it paired with
 * a parameter, the gradients and the state are W_t's, the parameters that got one (trained_w).
 * Every other line is outside the textbook, so its difference is the line itself. Differences of
 * gradients and optimizer state are split exactly (mt_category_fit): parameters with no
 * gradient/state at the moment, tensors in blocks larger than their parameter, tensors like no
 * parameter.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "util.h"

/* Gradients that mirror no parameter: what they are in this trace. A sparse embedding's gradient
 * (a recommendation model's table: SparseAdam; it read "DDP's and FSDP's buckets" in a run with
 * neither, train.py --model recsys on an H200), DDP's buckets or FSDP's flat sharded gradients
 * when the trace has them. */
static const char *grad_hint(const mt_analysis *a)
{
    const mt_categorizer *c = a->categories;
    if (c && mt_categorizer_saw_sparse_grad(c))
        return " (a sparse embedding's gradient holds the rows a batch touched, not the table)";
    unsigned par = c ? mt_categorizer_saw_parallel(c) : 0;
    if (par == MT_SAW_DP) /* train.py --data-parallel on 2 x H200: 2 such of 16.4 MB, 118
                           * of ResNet-18's parameters "without a gradient" */
        return " (DataParallel's gradients arrive summed from every GPU in flat buffers of up "
               "to 10 MiB, reduce_add_coalesced: the smaller parameters' .grad are views of them)";
    if (par == MT_SAW_DDP)
        return " (DDP's gradient buckets: a copy of every gradient, for the all-reduce; "
               "DistributedDataParallel(..., gradient_as_bucket_view=True) makes the gradients "
               "views of them instead)";
    return " (DDP's and FSDP's buckets hold many gradients each)";
}

static mt_cat_row *add_row(mt_cat_table *t, const char *name, uint64_t bytes)
{
    if (t->n >= sizeof t->rows / sizeof *t->rows) return NULL;
    mt_cat_row *r = &t->rows[t->n++];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    r->bytes = bytes;
    r->difference = (int64_t)bytes;
    return r;
}

static void textbook(mt_cat_row *r, uint64_t bytes)
{
    r->has_textbook = 1;
    r->textbook = bytes;
    r->difference = (int64_t)r->bytes - (int64_t)bytes;
}

static size_t appendf(char *buf, size_t cap, size_t at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static size_t appendf(char *buf, size_t cap, size_t at, const char *fmt, ...)
{
    if (at >= cap) return at;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + at, cap - at, fmt, ap);
    va_end(ap);
    return n < 0 ? at : at + (size_t)n;
}

/* what, of one: "parameters or buffers without ..." -> "parameter or buffer without ...",
 * "parameter copies ..." -> "parameter copy ..." (the explanations name counts of either) */
static const char *one_of(const char *what, uint64_t n, char *buf, size_t cap)
{
    static const struct { const char *many, *one; } words[] = {
        {"parameters", "parameter"}, {"buffers", "buffer"}, {"copies", "copy"}};
    if (n != 1) return what;
    size_t o = 0;
    for (const char *s = what; *s && o + 1 < cap;) {
        size_t w = 0;
        while (w < sizeof words / sizeof *words && strncmp(s, words[w].many, strlen(words[w].many)))
            w++;
        if (w == sizeof words / sizeof *words) {
            buf[o++] = *s++;
            continue;
        }
        s += strlen(words[w].many);
        for (const char *c = words[w].one; *c && o + 1 < cap;) buf[o++] = *c++;
    }
    buf[o] = 0;
    return buf;
}

/* "-1.00 MiB: 3 parameters without one now; +2.00 MiB: 2 blocks larger than their parameter..."
 * (without == NULL: the parameters without one are not part of the comparison) */
static size_t explain_fit(char *buf, size_t cap, size_t at, const mt_category_fit *f,
                          const char *without, const char *unpaired_hint)
{
    char b[32], b2[32], b3[32], one[256];
    const char *sep = "";
    /* Several tensors the size of no parameter against fewer parameter blocks left unmirrored,
     * the same bytes within their blocks' rounding: parameters that are views of one block, each
     * view with a tensor of its own. cuDNN's RNNs keep their weights so (flatten_parameters): an
     * LSTM's 8 weights in one 16 MiB block, Adam's 16 state tensors the views' sizes (H200,
     * train.py --model lstm), which read "16 tensors the size of no parameter" and "2 parameter
     * copies without state (buffers have none...)" as if unrelated. */
    uint64_t apart = f->unpaired > f->params_left ? f->unpaired - f->params_left
                                                  : f->params_left - f->unpaired;
    int views = without && f->n_params_left && f->n_unpaired > f->n_params_left &&
                apart <= 512 * f->n_unpaired + MT_FIT_SLACK * f->n_params_left;
    if (views) {
        at = appendf(buf, cap, at, "+%s: %" PRIu64 " tensors the size of no parameter, and -%s: "
                     "%" PRIu64 " %s mirrored by none, %s apart: as when parameters "
                     "are views of one block, each with a tensor of its own (an RNN's weights "
                     "after flatten_parameters())",
                     mt_format_bytes(f->unpaired, b, sizeof b), f->n_unpaired,
                     mt_format_bytes(f->params_left, b2, sizeof b2), f->n_params_left,
                     one_of("parameter copies", f->n_params_left, one, sizeof one),
                     mt_format_bytes(apart, b3, sizeof b3));
        sep = "; ";
    }
    if (without && f->n_params_left && !views) {
        at = appendf(buf, cap, at, "-%s: %" PRIu64 " %s", mt_format_bytes(f->params_left, b, sizeof b),
                     f->n_params_left, one_of(without, f->n_params_left, one, sizeof one));
        sep = "; ";
    }
    if (f->n_larger) {
        at = appendf(buf, cap, at, "%s+%s: %" PRIu64 " in blocks larger than their parameter's (the "
                     "caching allocator hands out a whole block rather than leave a small remainder)",
                     sep, mt_format_bytes(f->larger, b, sizeof b), f->n_larger);
        sep = "; ";
    }
    if (f->n_smaller) {
        at = appendf(buf, cap, at, "%s-%s: %" PRIu64 " in blocks smaller than their parameter's "
                     "(the caching allocator handed the parameter a whole block rather than leave "
                     "a small remainder)", sep,
                     mt_format_bytes(f->smaller, b, sizeof b), f->n_smaller);
        sep = "; ";
    }
    if (f->n_unpaired && !views)
        at = appendf(buf, cap, at, "%s+%s: %" PRIu64 " tensor%s the size of no parameter%s", sep,
                     mt_format_bytes(f->unpaired, b, sizeof b), f->n_unpaired,
                     f->n_unpaired == 1 ? "" : "s", unpaired_hint);
    return at;
}

/* The gradients against W, explained. FSDP2's gradients are one flat tensor per fully_shard group
 * (the reduce-scatter's output, viewed as each parameter's shard), W its shards one block each:
 * pairing them by size only said how many flat tensors happened to be the size of some shard
 * ("-25.14 MiB: 51 parameters or buffers without a gradient; +24.05 MiB: 4 tensors the size of no
 * parameter" on a GPT-2-like model's rank, 2 x H200). */
static size_t explain_grads(char *buf, size_t cap, size_t at, const mt_analysis *a,
                            const mt_category_fit *f, const char *without)
{
    if (a->categories && mt_categorizer_saw_parallel(a->categories) == MT_SAW_FSDP) {
        uint64_t n = f->n_paired + f->n_unpaired;
        return appendf(buf, cap, at, "%" PRIu64 " tensor%s: FSDP's sharded gradients, one flat "
                       "tensor per FSDP unit (a fully_shard call), where W counts each shard's "
                       "own block", n, n == 1 ? "" : "s");
    }
    return explain_fit(buf, cap, at, f, without, grad_hint(a));
}

/* W_t, the parameters a training step trains: W less the parameters (and buffers) that had no
 * gradient when a backward pass ended. Only where every gradient then paired with a parameter:
 * DDP's buckets with gradient_as_bucket_view, FSDP's flat shards hold gradients that name no
 * parameter, and then which parameters are trained is not known (W is used). And only where the
 * parameters left without one weigh more than the blocks' differences of the pairing: a gradient
 * in a larger block may pair with another parameter than its own (sizes are all the trace has),
 * leaving its own among those "without", so below that bound "without" may be nothing but the
 * pairing's slack, and a full training run keeps W (its buffers, BatchNorm's statistics, stay in
 * W as before). The optimizer state at the peak is a second witness: a parameter with state is
 * trained even if the backward pass after the peak gave it no gradient (a GAN's discriminator
 * pass leaves the generator's parameters without one, while both optimizers hold state), so
 * where the state mirrors more than W_t (its pairs over its copies k, beyond both fits' slack)
 * the gradients do not say what is trained, and W stays. What W_t leaves out is then the
 * parameters without a gradient of fit_after_backward[0]. Returns w when it does not apply. */
static uint64_t trained_w(const mt_device_report *d, uint64_t w, uint64_t k)
{
    if (!d->after_backward_known) return w;
    const mt_category_fit *g = &d->fit_after_backward[0], *s = &d->fit_at_peak[1];
    const uint64_t w2 = d->by_category_after_backward[MT_CAT_PARAMETERS];
    if (g->n_unpaired || !g->n_paired || !g->n_params_left || g->params_left >= w2 || w2 != w)
        return w;
    uint64_t with_state = k ? s->paired / k : 0, slack = g->larger + g->smaller;
    if (k) slack += (s->larger + s->smaller) / k;
    const uint64_t wt = w - g->params_left;
    return g->params_left <= slack || with_state > wt + slack ? w : wt;
}

/* f with `copies` of each frozen parameter taken out of its parameters left without a tensor:
 * what a category is missing beyond what W_t leaves out anyway. */
static mt_category_fit less_frozen(mt_category_fit f, uint64_t copies, uint64_t frozen,
                                   uint64_t n_frozen)
{
    f.params_left = f.params_left > copies * frozen ? f.params_left - copies * frozen : 0;
    f.n_params_left = f.n_params_left > copies * n_frozen ? f.n_params_left - copies * n_frozen : 0;
    return f;
}

/* What each category outside the textbook holds, for its line's "why" (after "not in the
 * textbook: "); the textbook's own categories explain their difference in mt_category_table. */
static const char *const outside_why[MT_CAT_BUILTIN_] = {
    /* FSDP2 keeps the root module's all-gathered weights from its forward to its backward pass
     * (a GPT-2-like model's tied embedding: 98 MiB of 110 at the peak) */
    [MT_CAT_UNSHARDED] = "FSDP's all-gathered weights of the modules it is running, whole (freed "
                         "after each module's forward and backward pass, unless it reshards later: "
                         "the root module, reshard_after_forward=False; reshard_after_forward=N "
                         "keeps a copy sharded over N ranks until the backward pass)",
    [MT_CAT_REPLICAS] = "DataParallel's copies of the weights and buffers on this GPU, broadcast "
                        "from the first at every forward pass (DistributedDataParallel, one "
                        "process per GPU, keeps one copy instead)",
    [MT_CAT_GENERATION] = "the decoding loop's own tensors outside the model (scores and their "
                          "processors, beam search's bookkeeping, the growing token ids)",
    [MT_CAT_OPTIMIZER_TEMP] = "the optimizer step's own temporaries (a foreach step makes "
                              "whole-model copies)",
    [MT_CAT_BACKWARD_TEMP] = "the backward pass's temporaries (gradients of activations)",
    [MT_CAT_INPUTS] = "tensors made or copied to the GPU outside any module (the batch)",
    [MT_CAT_CHECKPOINT] = "a checkpoint loaded onto the GPU (torch.load with map_location=\"cuda\", "
                          "or saved from a GPU and loaded without one; safetensors' load_file(..., "
                          "device=\"cuda\")), still referenced; once load_state_dict has copied it "
                          "into the model (the optimizer keeps loaded state as its own, without a "
                          "copy), the loaded dict holds a second copy: loading to the CPU "
                          "(map_location=\"cpu\", device=\"cpu\"), or del the dict, frees it",
    [MT_CAT_COMPILATION] = "torch.compile's own tensors, made while it compiles and autotunes "
                           "(candidate kernels' benchmark inputs and outputs, mode=\"max-autotune\" "
                           "most of all; a flush buffer for the L2 cache): the first steps' cost, "
                           "gone once every kernel is chosen",
    [MT_CAT_WORKSPACE] = "cuBLAS/cuDNN workspaces taken from PyTorch's allocator (one per stream "
                         "and thread)",
    [MT_CAT_OTHER] = "tensors no rule placed (report --frames all shows their stacks)",
};

int mt_category_table(const mt_analysis *a, const mt_device_report *d, mt_cat_table *t)
{
    memset(t, 0, sizeof *t);
    if (!d->categories_known || !a->categories) return 0;
    t->known = 1;
    const mt_categorizer *c = a->categories;
    uint64_t k = 0;
    t->optimizer = mt_categorizer_optimizer(c, &k);
    if (t->optimizer && d->after_backward_known && d->optimizer_stateless) {
        k = 0; /* its steps before the backward pass after the peak left no tensor */
        if (strcmp(t->optimizer, "SGD (momentum)") == 0) t->optimizer = "SGD (no momentum)";
    }
    t->state_in_w = k;
    const uint64_t *at = d->by_category_at_peak;
    const uint64_t w = at[MT_CAT_PARAMETERS];
    const uint64_t wt = trained_w(d, w, k); /* = w when all of W is trained */
    const uint64_t frozen = w - wt, n_frozen = wt != w ? d->fit_after_backward[0].n_params_left : 0;
    t->w = w;
    t->w_trained = wt;
    const char *wn = wt != w ? "W_t" : "W"; /* what the gradients and the state mirror */
    char b1[32], b2[32], tm[48];
    for (unsigned cat = MT_CAT_PARAMETERS; cat < mt_category_count(c) && cat < MT_CAT_MAX; cat++) {
        int core = cat == MT_CAT_PARAMETERS || cat == MT_CAT_GRADIENTS ||
                   cat == MT_CAT_OPTIMIZER_STATE || cat == MT_CAT_ACTIVATIONS;
        if (!core && !at[cat]) continue;
        mt_cat_row *r = add_row(t, mt_category_name(c, cat), at[cat]);
        if (!r) break;
        r->category = cat;
        t->tensors += at[cat];
        size_t n = 0;
        switch (cat) {
        case MT_CAT_PARAMETERS:
            textbook(r, w);
            n = appendf(r->why, sizeof r->why, n, "W, the weights (%smodule buffers such as "
                        "BatchNorm's statistics included)",
                        mt_categorizer_saw_parallel(c) & MT_SAW_FSDP
                            ? "FSDP: this rank's shards; " : "");
            if (wt != w)
                appendf(r->why, sizeof r->why, n, "; W_t = %s of them got a gradient in the backward "
                        "pass, paired by size (trained: the gradients' and the optimizer state's "
                        "textbook); %" PRIu64 " (%s) got none (frozen: requires_grad=False, "
                        "buffers, copies such as an EMA model's)",
                        mt_format_bytes(wt, b1, sizeof b1), n_frozen,
                        mt_format_bytes(frozen, b2, sizeof b2));
            break;
        case MT_CAT_GRADIENTS:
            if (!at[cat] && !mt_categorizer_saw_backward(c)) {
                /* inference (generate(), an evaluation loop): the textbook's W of gradients is a
                 * training run's, and would only widen the difference on the total line */
                snprintf(r->why, sizeof r->why, "no backward pass in the trace (inference, or "
                         "no training step while recording): no gradient expected");
                break;
            }
            textbook(r, wt);
            if (!at[cat]) {
                n = appendf(r->why, sizeof r->why, n, "no gradient is live at the peak (a forward "
                            "pass, a backward pass before its first gradient, or "
                            "zero_grad(set_to_none=True) has freed them)");
            } else {
                /* at the peak, the parameters without a gradient beyond the frozen ones */
                mt_category_fit f = less_frozen(d->fit_at_peak[0], 1, frozen, n_frozen);
                n = explain_grads(r->why, sizeof r->why, n, a, &f,
                                  wt != w ? "trained parameters without a gradient at the peak"
                                          : "parameters or buffers without a gradient at the peak");
            }
            if (d->after_backward_known) {
                const uint64_t g = d->by_category_after_backward[MT_CAT_GRADIENTS];
                const uint64_t w2 = d->by_category_after_backward[MT_CAT_PARAMETERS];
                n = appendf(r->why, sizeof r->why, n, "%safter the backward pass (%s): %s",
                            n ? ". " : "", mt_format_rel(d->after_backward_time_ns, tm, sizeof tm),
                            mt_format_bytes(g, b1, sizeof b1));
                const uint64_t m = wt != w ? wt : w2; /* W_t is W2 less the frozen */
                if (g == m)
                    n = appendf(r->why, sizeof r->why, n, " = %s", wn);
                else
                    n = appendf(r->why, sizeof r->why, n, ", %s %s%s", wn, g > m ? "+" : "-",
                                mt_format_bytes(g > m ? g - m : m - g, b2, sizeof b2));
                if (g != m) {
                    size_t open = n < sizeof r->why ? n : sizeof r->why - 1;
                    n = appendf(r->why, sizeof r->why, n, " (");
                    size_t inside = n;
                    n = explain_grads(r->why, sizeof r->why, n, a, &d->fit_after_backward[0],
                                      wt != w ? NULL : "parameters or buffers without a gradient");
                    if (n == inside) /* nothing to explain it by (no gradient paired): no "()" */
                        r->why[n = open] = 0;
                    else
                        n = appendf(r->why, sizeof r->why, n, ")");
                }
            }
            break;
        case MT_CAT_OPTIMIZER_STATE:
            if (!t->optimizer) {
                snprintf(r->why, sizeof r->why, "no optimizer step of a known kind in the trace: no "
                         "textbook estimate");
                break;
            }
            textbook(r, k * wt);
            if (!k) { /* mt_categorizer_optimizer: its steps left no tensor */
                snprintf(r->why, sizeof r->why, "%s: no state (every tensor its steps made died "
                         "in the step)", t->optimizer);
                break;
            }
            n = appendf(r->why, sizeof r->why, n, "%s: %" PRIu64 "%s", t->optimizer, k, wn);
            if (at[cat] != k * wt) {
                /* blocks of 512 B only: tensors of at most 512 bytes, where a fused or
                 * capturable Adam keeps each parameter's step count (transformers' Trainer
                 * defaults to fused AdamW) */
                /* the frozen have no state to miss */
                mt_category_fit fs = less_frozen(d->fit_at_peak[1], k, frozen, n_frozen);
                int small = fs.n_unpaired && fs.unpaired == 512 * fs.n_unpaired;
                size_t open = n;
                n = appendf(r->why, sizeof r->why, n, "; ");
                size_t inside = n;
                n = explain_fit(r->why, sizeof r->why, n, &fs,
                                wt != w ? "trained parameter copies without state at the peak "
                                          "(state is made by the first step)"
                                        : "parameter copies without state at the peak (buffers "
                                          "have none; state is made by the first step)",
                                !small ? ""
                                : strcmp(t->optimizer, "ASGD") == 0
                                    /* its eta and mu, made on the parameter's device (train.py
                                     * --optim asgd on an H200: 2 per parameter) */
                                    ? ", each one 512-byte block: ASGD's eta and mu, scalars it "
                                      "keeps per parameter on the GPU"
                                    : ", each one 512-byte block: the size of a step count, "
                                      "which fused or capturable Adam keeps per parameter on "
                                      "the GPU");
                if (n == inside && open < sizeof r->why) r->why[n = open] = 0; /* nothing to say */
                /* a resumed run: Optimizer.load_state_dict adopts loaded state already on the
                 * parameters' device without a copy, so its state is the checkpoint's tensors
                 * (train.py --resume on an H200: state 0 B, the checkpoint 136.60 MiB) */
                if (at[cat] < k * wt && at[MT_CAT_CHECKPOINT] >= k * wt - at[cat])
                    n = appendf(r->why, sizeof r->why, n, "; %s short, and a checkpoint loaded "
                                "onto the GPU holds %s (its line below): the optimizer keeps loaded "
                                "state as its own without a copy, so its state is likely there",
                                mt_format_bytes(k * wt - at[cat], b1, sizeof b1),
                                mt_format_bytes(at[MT_CAT_CHECKPOINT], b2, sizeof b2));
            }
            break;
        case MT_CAT_ACTIVATIONS:
            textbook(r, at[cat]);
            snprintf(r->why, sizeof r->why, "the textbook's activations, as measured");
            break;
        case MT_CAT_KV_CACHE:
            textbook(r, at[cat]);
            if (mt_categorizer_saw_backward(c))
                /* transformers keeps a cache in a training forward too (use_cache defaults to
                 * True): a copy of every layer's keys and values that no backward pass needs
                 * (GPT-2-like, 4 layers, batch 8 x 256: max_memory_allocated 31 MiB lower with
                 * use_cache=False, against 32 MiB of cache at the peak; docs/analysis.md) */
                snprintf(r->why, sizeof r->why, "the keys and values transformers' cache copied "
                         "in a training forward: model(..., use_cache=False) does without them");
            else
                snprintf(r->why, sizeof r->why, "the keys and values an inference loop keeps per "
                         "sequence (2 x layers x tokens x heads x head size), as measured");
            break;
        default: /* a line outside the textbook, said once (categories above say more) */
            snprintf(r->why, sizeof r->why, "not in the textbook: %s",
                     cat < MT_CAT_BUILTIN_ && outside_why[cat] ? outside_why[cat]
                                                               : "your rules file's category");
        }
    }
    const mt_breakdown *bd = &d->at_peak;
    if (bd->valid) {
        mt_cat_row *r;
        uint64_t cache = bd->allocated_known ? bd->cached_free_bytes
                         : bd->reserved_bytes > t->tensors ? bd->reserved_bytes - t->tensors : 0;
        if ((r = add_row(t, "allocator cache", cache))) {
            r->outside = 1;
            snprintf(r->why, sizeof r->why, "not in the textbook: reserved by PyTorch's caching "
                     "allocator and free at the peak (kept for its next tensors)");
        }
        if (bd->other_bytes && (r = add_row(t, "other libraries", bd->other_bytes))) {
            r->outside = 1;
            size_t n = appendf(r->why, sizeof r->why, 0, "not in the textbook:");
            for (size_t i = 0; i < bd->n_owners; i++)
                n = appendf(r->why, sizeof r->why, n, "%s %s %s", i ? "," : "", bd->owners[i].owner,
                            mt_format_bytes(bd->owners[i].bytes, b1, sizeof b1));
        }
        t->process_known = bd->process_known;
        if (bd->process_known && (r = add_row(t, "CUDA context & driver", (uint64_t)bd->context_bytes))) {
            r->outside = 1;
            textbook(r, (uint64_t)bd->context_bytes);
            snprintf(r->why, sizeof r->why, "the textbook's context, as measured (nvidia-smi's total "
                     "less everything above)");
        }
        t->process = bd->process_bytes;
    }
    for (size_t i = 0; i < t->n; i++) {
        t->measured += t->rows[i].bytes;
        t->textbook += t->rows[i].has_textbook ? t->rows[i].textbook : 0;
    }
    return 0;
}
