/* Categories: what a tensor is for, in a training run's own words (record --tensors).
 *
 * People estimate training memory as weights + gradients + optimizer state + activations + the
 * CUDA context. Each tensor of a trace is given one of those categories from its stack (the
 * Python frames, the ATen operator, the autograd node) and, where the stack cannot tell, from its
 * lifetime. The rules, first match wins (docs/analysis.md says the same for users):
 *
 *   user rules           a rules file (mt_categorizer_load_rules): CATEGORY <- PATTERN, a
 *                        substring of any frame name; first match wins, before the rules below
 *   library workspaces   a library asked for it (a native frame of cuBLAS, cuDNN or NCCL, or
 *                        PyTorch's cuBLAS handle and workspace functions: mt_owner_of_name)
 *   compilation          torch.compile's own tensors: inductor compiling a graph (compile_fx.py,
 *                        its passes in fx_passes/ and pattern_matcher.py) and choosing kernels
 *                        (mode="max-autotune": select_algorithm.py, autotune_process.py, their
 *                        benchmarks' random inputs and outputs), and the first call's autotuning
 *                        of a kernel's configurations (triton_heuristics.py's benchmarks and the
 *                        arguments it clones, benchmarking.py's buffer that flushes the L2 cache)
 *   optimizer state      a Python frame in torch/optim/ named *._init_group (where most optimizers
 *                        make their per-parameter state), or any optimizer allocation still live
 *                        when the step has ended (SGD's momentum buffers: made in the first step)
 *   optimizer temporaries  any other allocation under torch/optim/ (a foreach step's scratch)
 *   gradients            under AccumulateGrad (a parameter's .grad), DDP's reducer (gradient
 *                        buckets: made when DDP is built and again in its first forward passes,
 *                        so they say no phase); and any backward allocation still live when the
 *                        backward pass has ended (autograd hands a backward op's output to .grad
 *                        without a copy: only the lifetime tells it from a temporary; FSDP's
 *                        reduce-scatter output, its sharded gradients, is one: its input, the
 *                        whole gradients, dies in the pass)
 *   backward temporaries an allocation of the backward pass (an autograd node on the stack,
 *                        autograd's worker thread, an autograd.Function's Python backward under
 *                        BackwardCFunction.apply such as torch.compile's compiled backward,
 *                        activation checkpointing's recomputation from a
 *                        saved tensor's unpack hook) that dies with the pass; and backward()'s
 *                        seed (the loss's gradient, torch.autograd _make_grads), however long
 *                        it lives
 *   KV cache             an inference loop's cache of keys and values: a Python frame in
 *                        transformers' cache_utils.py (DynamicCache's growth, beam search's
 *                        reordering, StaticCache's buffers), or a Python function whose name says
 *                        kv_cache, KVCache or KVPool (vLLM's and SGLang's cache makers)
 *   unsharded parameters FSDP's all-gathered weights (a Python frame in torch/distributed/fsdp/
 *                        whose name says all_gather, unshard or sharded_post_forward: FSDP2's
 *                        all-gather outputs and buffer, and what reshard_after_forward=N keeps of
 *                        them until the backward pass; FSDP1's padded unsharded flat parameter).
 *                        They come and go with the modules FSDP runs, in the forward pass and in
 *                        the backward pass alike, so they say no phase
 *   parameter replicas   torch.nn.DataParallel's copies of the module's weights and buffers on
 *                        its other GPUs (a Python frame in torch/nn/parallel/replicate.py), made at
 *                        every forward pass and dropped after the backward pass; what it scatters
 *                        to them (scatter_gather.py) is an input
 *   parameters           under Module._apply / .to / .cuda, nn.Parameter, a module's __init__ or
 *                        reset_parameters, FSDP's sharded parameters (this rank's shards: W),
 *                        transformers' from_pretrained and Accelerate's loading of saved weights
 *   checkpoint           put on the GPU by torch.load (a Python frame in torch/serialization.py:
 *                        map_location="cuda", or tensors saved from a GPU) or by safetensors
 *                        (load_file(..., device="cuda"), its Rust reader): a resumed run's
 *                        loaded dict. load_state_dict copies the weights into the parameters, and
 *                        Optimizer.load_state_dict keeps loaded state already on its parameters'
 *                        device as its own, without a copy (so that state is here, not under
 *                        optimizer state: the trace sees no allocation that tells which)
 *   activations          under a module's forward (Module._call_impl, *.forward), and
 *                        torch.nn.functional called by the loop outside any module (the loss;
 *                        tried after the generation loop's rule)
 *   generation loop      a decoding loop's own tensors outside the model: a Python frame in
 *                        transformers' generation/ (the scores and their processors, beam search's
 *                        bookkeeping, the growing token ids and attention mask)
 *   inputs               made or copied to the GPU by Python code outside any module, optimizer or
 *                        backward (an ATen factory or copy: to, copy_, randn, empty, ...), and a
 *                        batch augmented on the GPU outside a model's forward (torchvision's
 *                        transforms, Kornia's augmentations)
 *   other                everything else
 * Outside the allocator, the breakdown (breakdown.c) already names library workspaces, the
 * allocator's cache and the context.
 *
 * Phases: parameters, activations, the KV cache and inputs say "forward", backward temporaries
 * and gradients "backward", the optimizer's tensors "optimizer" (workspaces, other and user
 * categories say nothing). A phase has ended when a tensor of another phase is allocated, and the
 * backward pass also at the first tensor event (a free too) of a thread other than its own: then
 * the live tensors are promoted (mt_categorizer_phase). A caller that needs a tensor's final
 * category at an earlier moment (the analysis, at the peak) keeps replaying until the next
 * promotion, or the end.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static const char *const builtin_names[MT_CAT_BUILTIN_] = {
    [MT_CAT_NONE] = "not a tensor",
    [MT_CAT_PARAMETERS] = "parameters",
    [MT_CAT_UNSHARDED] = "unsharded parameters",
    [MT_CAT_REPLICAS] = "parameter replicas",
    [MT_CAT_GRADIENTS] = "gradients",
    [MT_CAT_OPTIMIZER_STATE] = "optimizer state",
    [MT_CAT_OPTIMIZER_TEMP] = "optimizer temporaries",
    [MT_CAT_ACTIVATIONS] = "activations",
    [MT_CAT_KV_CACHE] = "KV cache",
    [MT_CAT_GENERATION] = "generation loop",
    [MT_CAT_BACKWARD_TEMP] = "backward temporaries",
    [MT_CAT_INPUTS] = "inputs",
    [MT_CAT_CHECKPOINT] = "checkpoint",
    [MT_CAT_COMPILATION] = "compilation",
    [MT_CAT_WORKSPACE] = "library workspaces",
    [MT_CAT_OTHER] = "other",
};

typedef struct user_rule {
    char *pattern;
    uint8_t category;
} user_rule;

struct mt_categorizer {
    mt_frames *f;
    /* stack -> category + 1 | says no phase << 6 | backward()'s seed (never promoted) << 7;
     * 0 = not yet (categories are below MT_CAT_MAX, 32: six bits hold them). Below
     * BY_ID_MAX, an array indexed by the stack id (found without a hash, once per tensor
     * allocation; grown to the largest id seen: node ids are dense); above it, or when the array
     * cannot grow, the map (a: that byte) */
    uint8_t *by_id;
    size_t n_by_id;
    mt_u64map cache;
    mt_u64map said; /* a native frame's name (its pointer) -> what it says (native_says) */
    user_rule *rules;
    size_t n_rules;
    char *names[MT_CAT_MAX];   /* user categories' names, from MT_CAT_BUILTIN_ on */
    size_t n_names;
    int phase;                 /* MT_PHASE_*: the phase of the last tensor that said one */
    /* the threads of the backward pass in progress: those that made one of its tensors (not the
     * seed: backward() makes it on the caller's thread, which then waits). Autograd runs each
     * device's work on a thread of its own, so a model on several GPUs (DataParallel, a model
     * split across devices) has several. Until one has made a tensor, the seed's thread. */
    uint32_t backward_tids[16], seed_tid;
    unsigned n_backward_tids;
    uint64_t backward_ends, optimizer_ends; /* phases ended so far (each a promotion) */
    int saw_backward;          /* a backward tensor anywhere in the trace (kept by a restart: the
                                  pass that replays may stop at the peak) */
    int saw_sparse_grad;       /* a stack of a sparse embedding's backward (kept the same way; and
                                  a stack is categorized once, so it is never seen again) */
    unsigned saw_parallel;     /* MT_SAW_DDP | MT_SAW_FSDP | MT_SAW_DP, kept the same way */
    int saw_step_end, saw_state; /* since the replay began: an optimizer step ended; a tensor was
                                    made as state or outlived a step (mt_categorizer_stateless) */
    uint64_t optimizer_kind_w; /* the optimizer's textbook state, in parameter sizes (Adam: 2) */
    char optimizer[64];
    /* mt_categorizer_watch: stack -> a: hash of the names its category was made from */
    mt_u64map watched;
    int watching, blind, watch_failed;
};

const char *mt_category_name(const mt_categorizer *c, unsigned cat)
{
    if (cat < MT_CAT_BUILTIN_) return builtin_names[cat];
    if (c && cat - MT_CAT_BUILTIN_ < c->n_names) return c->names[cat - MT_CAT_BUILTIN_];
    return "?";
}

size_t mt_category_count(const mt_categorizer *c)
{
    return MT_CAT_BUILTIN_ + (c ? c->n_names : 0);
}

mt_categorizer *mt_categorizer_new(mt_frames *f)
{
    mt_categorizer *c = calloc(1, sizeof *c);
    if (c) c->f = f;
    return c;
}

void mt_categorizer_free(mt_categorizer *c)
{
    if (!c) return;
    mt_u64map_destroy(&c->cache);
    free(c->by_id);
    mt_u64map_destroy(&c->said);
    mt_u64map_destroy(&c->watched);
    for (size_t i = 0; i < c->n_rules; i++) free(c->rules[i].pattern);
    free(c->rules);
    for (size_t i = 0; i < c->n_names; i++) free(c->names[i]);
    free(c);
}

static int category_of_name(mt_categorizer *c, const char *name)
{
    for (unsigned k = MT_CAT_PARAMETERS; k < MT_CAT_BUILTIN_; k++)
        if (strcmp(name, builtin_names[k]) == 0) return (int)k;
    for (size_t k = 0; k < c->n_names; k++)
        if (strcmp(name, c->names[k]) == 0) return (int)(MT_CAT_BUILTIN_ + k);
    if (MT_CAT_BUILTIN_ + c->n_names >= MT_CAT_MAX) return -1;
    if (!(c->names[c->n_names] = strdup(name))) return -1;
    return (int)(MT_CAT_BUILTIN_ + c->n_names++);
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
        s[--n] = 0;
    return s;
}

int mt_categorizer_load_rules(mt_categorizer *c, const char *path, char *err, size_t errlen)
{
    FILE *fp = fopen(path, "re");
    if (!fp) {
        snprintf(err, errlen, "%s: cannot open the category rules", path);
        return -1;
    }
    char line[1024];
    int lineno = 0, rc = 0;
    while (rc == 0 && fgets(line, sizeof line, fp)) {
        lineno++;
        char *s = trim(line);
        if (!*s || *s == '#') continue;
        char *arrow = strstr(s, "<-");
        if (!arrow) {
            snprintf(err, errlen, "%s:%d: want 'CATEGORY <- PATTERN'", path, lineno);
            rc = -1;
            break;
        }
        *arrow = 0;
        char *name = trim(s), *pattern = trim(arrow + 2);
        if (!*name || !*pattern) {
            snprintf(err, errlen, "%s:%d: empty category or pattern", path, lineno);
            rc = -1;
            break;
        }
        int cat = category_of_name(c, name);
        user_rule *nr = cat < 0 ? NULL : realloc(c->rules, (c->n_rules + 1) * sizeof *nr);
        if (!nr || !(nr[c->n_rules].pattern = strdup(pattern))) {
            snprintf(err, errlen, "%s:%d: too many categories, or out of memory", path, lineno);
            if (nr) c->rules = nr;
            rc = -1;
            break;
        }
        c->rules = nr;
        nr[c->n_rules++].category = (uint8_t)cat;
    }
    fclose(fp);
    mt_u64map_clear(&c->cache);
    if (c->by_id) memset(c->by_id, 0, c->n_by_id);
    return rc;
}

static int has(const char *s, const char *needle) { return strstr(s, needle) != NULL; }

/* A Python frame's short name is "qualname (path:line)": the parts, borrowed. */
static void py_parts(const char *name, const char **path, size_t *qlen)
{
    const char *open = strrchr(name, '(');
    *qlen = open && open > name ? (size_t)(open - name - 1) : strlen(name);
    *path = open ? open + 1 : "";
}

static int qual_ends(const char *name, size_t qlen, const char *suffix)
{
    size_t k = strlen(suffix);
    return qlen >= k && strncmp(name + qlen - k, suffix, k) == 0;
}

/* needle inside the first qlen characters of name (the qualname, not the path) */
static int has_within(const char *name, size_t qlen, const char *needle)
{
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= qlen; i++)
        if (strncmp(name + i, needle, k) == 0) return 1;
    return 0;
}

static int qual_is(const char *name, size_t qlen, const char *q)
{
    return qlen == strlen(q) && strncmp(name, q, qlen) == 0;
}

/* The optimizer's textbook state, in parameter sizes, from where its step runs. A second kind
 * with the same state per parameter is named beside the first (a recommendation model's
 * SparseAdam for its table and AdamW for the rest: "SparseAdam and Adam or AdamW"); one with
 * another leaves the first's, the textbook being one k for all of W. */
static void note_optimizer(mt_categorizer *c, const char *path)
{
    static const struct {
        const char *file, *name;
        uint64_t w;
    } kinds[] = {{"torch/optim/adamw.py", "AdamW", 2},
                 /* AdamW is Adam with decoupled weight decay: recent PyTorch runs both from adam.py */
                 {"torch/optim/adam.py", "Adam or AdamW", 2},
                 {"torch/optim/sgd.py", "SGD (momentum)", 1}, {"torch/optim/rmsprop.py", "RMSprop", 1},
                 {"torch/optim/adagrad.py", "Adagrad", 1},
                 /* the rest of torch.optim, with their defaults: two tensors the size of each
                  * parameter (NAdam, RAdam: exp_avg, exp_avg_sq; Adamax: exp_avg, exp_inf;
                  * Adadelta: square_avg, acc_delta; Rprop: prev, step_size; SparseAdam's dense
                  * moments), or one (ASGD's average ax; its eta and mu are scalars) */
                 {"torch/optim/nadam.py", "NAdam", 2}, {"torch/optim/radam.py", "RAdam", 2},
                 {"torch/optim/adamax.py", "Adamax", 2}, {"torch/optim/adadelta.py", "Adadelta", 2},
                 {"torch/optim/rprop.py", "Rprop", 2}, {"torch/optim/sparse_adam.py", "SparseAdam", 2},
                 {"torch/optim/asgd.py", "ASGD", 1}};
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
        if (has(path, kinds[i].file)) {
            size_t n = strlen(c->optimizer);
            if (!n) {
                snprintf(c->optimizer, sizeof c->optimizer, "%s", kinds[i].name);
                c->optimizer_kind_w = kinds[i].w;
            } else if (kinds[i].w == c->optimizer_kind_w && !strstr(c->optimizer, kinds[i].name)) {
                size_t m = strlen(kinds[i].name);
                if (n + 5 + m < sizeof c->optimizer) {
                    memcpy(c->optimizer + n, " and ", 5);
                    memcpy(c->optimizer + n + 5, kinds[i].name, m + 1);
                }
            }
            return;
        }
}

#define PATH_CAP 512

/* What a native frame's name says, once per name: stacks share most of their frames, and the
 * owner's match and the searches below were most of what categorizing a new stack cost. Keyed
 * by the name's pointer: the frames own their names and never free or reuse one while they live
 * (a name built again is a new string). */
enum { SAYS_WORKSPACE = 1, SAYS_GRADS = 2, SAYS_BACKWARD = 4, SAYS_FACTORY = 8, SAYS_KNOWN = 16,
       SAYS_CHECKPOINT = 32, SAYS_SPARSE_GRAD = 64, SAYS_REDUCER = 128 };

static unsigned native_says(mt_categorizer *c, const char *s)
{
    mt_u64map_slot *m = mt_u64map_find(&c->said, (uint64_t)(uintptr_t)s);
    if (m) return (unsigned)m->a;
    unsigned b = SAYS_KNOWN;
    int is_allocator = 0;
    if (mt_owner_of_name(s, &is_allocator) && !is_allocator) b |= SAYS_WORKSPACE;
    if (has(s, "AccumulateGrad")) b |= SAYS_GRADS;
    if (has(s, "c10d::Reducer")) b |= SAYS_GRADS | SAYS_REDUCER;
    if (has(s, "torch::autograd::Engine") || has(s, "torch::autograd::generated::"))
        b |= SAYS_BACKWARD;
    if (has(s, "at::_ops::_to_copy") || has(s, "at::_ops::copy_") || has(s, "at::_ops::randn") ||
        has(s, "at::_ops::rand") || has(s, "at::_ops::empty") || has(s, "at::_ops::zeros") ||
        has(s, "at::_ops::ones") || has(s, "at::_ops::full") || has(s, "at::_ops::randint") ||
        has(s, "at::_ops::arange") || has(s, "at::_ops::tensor"))
        b |= SAYS_FACTORY;
    /* an Embedding's or EmbeddingBag's backward with sparse=True: at::_ops::embedding_sparse_
     * backward, _embedding_bag_sparse_backward (a gradient of the rows a batch touched) */
    if (has(s, "_sparse_backward")) b |= SAYS_SPARSE_GRAD;
    /* safetensors' own reader (Rust), also when Python calls safe_open().get_tensor() itself */
    if (has(s, "safetensors_rust::")) b |= SAYS_CHECKPOINT;
    if ((m = mt_u64map_upsert(&c->said, (uint64_t)(uintptr_t)s))) m->a = b; /* else: not kept */
    return b;
}

/* The category of a stack; *seed: backward()'s seed, never promoted; *no_phase: a category that
 * says a phase, whose tensor here says none (DDP's gradient buckets, made outside the backward
 * pass: they ended it in DDP's first forward passes, and the "after the backward pass" that the
 * report gives was a forward's moment; 2 x H200, samples/ddp.py) */
static unsigned from_stack(mt_categorizer *c, uint32_t stack, int *seed, int *no_phase)
{
    const char *names[PATH_CAP];
    uint8_t flags[PATH_CAP];
    if (c->blind) return MT_CAT_OTHER;
    mt_path_opts opts = {.style = MT_NAME_SHORT, .filter = MT_FRAMES_ALL, .flags = flags};
    size_t n = mt_frames_path(c->f, stack, opts, names, PATH_CAP);
    if (n > PATH_CAP) n = PATH_CAP;
    if (c->watching) { /* what the category is made from: the names of the stack's frames */
        mt_u64map_slot *w = mt_u64map_upsert(&c->watched, stack);
        uint64_t h = mt_frames_path_hash(c->f, stack, MT_NAME_SHORT);
        if (w && h)
            w->a = h;
        else
            c->watch_failed = 1;
    }
    for (size_t r = 0; r < c->n_rules; r++)
        for (size_t i = 0; i < n; i++)
            if (has(names[i], c->rules[r].pattern)) return c->rules[r].category;
    int py = 0, optim = 0, init_group = 0, grads = 0, backward = 0, params = 0, forward = 0;
    int factory = 0, workspace = 0, kv = 0, gen = 0, ckpt = 0, augment = 0, model_forward = 0;
    int functional = 0, unsharded = 0, reducer = 0, replicas = 0, scattered = 0, compiling = 0;
    for (size_t i = 0; i < n; i++) {
        const char *s = names[i];
        if (flags[i] & MT_FF_PYTHON) {
            const char *path;
            size_t q;
            py_parts(s, &path, &q);
            py = 1;
            if (has(path, "torch/optim/")) {
                optim = 1;
                init_group |= qual_ends(s, q, "._init_group");
                note_optimizer(c, path);
            }
            /* FSDP: this rank's shards are its parameters (FSDP2's FSDPParam, FSDP1's
             * FlatParamHandle); what its all-gathers make are the whole weights of the modules
             * being run, for a while. Before, both were parameters, and W (the textbook's
             * gradients and state) read 185.83 MiB for a GPT-2-like model sharded over 2 GPUs
             * whose rank held 75.14 MiB of shards. The reduce-scatter's input (the whole
             * gradients) dies in the backward pass, its output (this rank's gradients) outlives
             * it: backward tensors, promoted by their lifetime as autograd's are */
            if (has(path, "torch/distributed/fsdp/")) {
                c->saw_parallel |= MT_SAW_FSDP;
                if (has_within(s, q, "reduce")) backward = 1;
                /* reshard_after_forward=N (an int) keeps a slice of the gathered weights from
                 * the forward pass to the backward pass (to_sharded_post_forward's clone, in
                 * _fsdp_param.py): whole weights of a smaller world, not this rank's shards */
                if (has_within(s, q, "all_gather") || has_within(s, q, "unshard") ||
                    has_within(s, q, "sharded_post_forward"))
                    unsharded = 1;
                if (has(path, "_fsdp_param.py") || has(path, "_flat_param.py")) params = 1;
            }
            /* torch.compile at work (max-autotune on a ResNet-18, H200: its choice among
             * convolution kernels, 390.85 MiB of benchmark inputs and outputs, was the peak and
             * read "activations"). The compiled graph's own run goes through output_code.py,
             * utils.py and the generated module; triton_heuristics.py launches every kernel, and
             * allocates only to autotune one */
            if (has(path, "torch/_inductor/") &&
                (has(path, "/compile_fx.py") || has(path, "/select_algorithm.py") ||
                 has(path, "/autotune_process.py") || has(path, "/fx_passes/") ||
                 has(path, "/pattern_matcher.py") || has(path, "/runtime/benchmarking.py") ||
                 (has(path, "/runtime/triton_heuristics.py") &&
                  (has_within(s, q, "bench") || has_within(s, q, "autotune") ||
                   has_within(s, q, "clone_args")))))
                compiling = 1;
            /* DataParallel (train.py --data-parallel on 2 x H200): its replicas of a ResNet-18
             * on the second GPU (45.22 MB) and the batch's half scattered there read
             * "activations" (under DataParallel.forward) */
            if (has(path, "torch/nn/parallel/data_parallel.py")) c->saw_parallel |= MT_SAW_DP;
            if (has(path, "torch/nn/parallel/replicate.py")) replicas = 1;
            if (has(path, "torch/nn/parallel/scatter_gather.py") && has_within(s, q, "scatter"))
                scattered = 1;
            if (has(path, "torch/nn/modules/module.py") &&
                (qual_is(s, q, "Module._apply") || qual_is(s, q, "Module.to") ||
                 qual_is(s, q, "Module.cuda")))
                params = 1;
            if (has(path, "torch/nn/parameter.py")) params = 1;
            /* a cache of keys and values: before the constructor rule (StaticCache.__init__
             * makes its buffers) and the forward's (the cache grows inside it) */
            if ((has(path, "transformers/") && has(path, "cache_utils.py")) ||
                has_within(s, q, "kv_cache") || has_within(s, q, "KVCache") ||
                has_within(s, q, "KVPool"))
                kv = 1;
            if (has(path, "transformers/generation/")) gen = 1; /* generate()'s own code */
            if (has(path, "torch/serialization.py")) ckpt = 1; /* torch.load's restore */
            /* safetensors' load_file(..., device="cuda") and load(): a .safetensors file's
             * tensors made on the GPU (from_pretrained's use of it is the parameters', above) */
            if (has(path, "safetensors/torch.py")) ckpt = 1;
            /* torch.nn.functional called by the training loop itself, outside any module: the
             * loss (F.cross_entropy(logits, labels): its log-softmax, batch x tokens x vocab, is
             * saved for the backward pass) and whatever else the forward's outputs go through */
            if (has(path, "torch/nn/functional.py")) functional = 1;
            if (qual_ends(s, q, ".__init__") || qual_ends(s, q, ".reset_parameters"))
                params |= !forward; /* construction, not a forward calling a constructor */
            /* a saved model loaded onto the GPU: transformers' from_pretrained (its loading code
             * in modeling_utils.py, and core_model_loading.py, whose thread pool materializes
             * each weight with no from_pretrained frame on its stack) and Accelerate's
             * set_module_tensor_to_device. Without this a fine-tuned model's weights were
             * "inputs", W was 0, and every gradient and state tensor mirrored no parameter */
            if ((has(path, "transformers/") &&
                 (has(path, "core_model_loading.py") ||
                  (has(path, "modeling_utils.py") &&
                   (has_within(s, q, "pretrained") || has_within(s, q, "load"))))) ||
                (has(path, "accelerate/") && has_within(s, q, "set_module_tensor_to_device")))
                params |= !forward;
            /* a batch augmented on the GPU: torchvision's transforms (v2's are Modules, so their
             * tensors were activations) and Kornia's augmentations, outside a model's forward */
            int transforms = has(path, "torchvision/transforms/") || has(path, "kornia/augmentation/");
            augment |= transforms && !model_forward;
            if (qual_ends(s, q, ".forward") && !transforms) model_forward = 1;
            if (qual_ends(s, q, ".forward") || qual_is(s, q, "Module._call_impl")) forward = 1;
            /* a Python backward: one the engine runs, an autograd.Function's (torch.compile's
             * compiled backward is one), always under BackwardCFunction.apply; and
             * Tensor.backward's own first gradient. Not any method named backward: the training
             * frameworks' (Accelerate's Accelerator.backward, Lightning's, DeepSpeed's) wrap
             * loss.backward(), and what they make first (the loss divided for gradient
             * accumulation, or scaled) is made before the pass; it was called a gradient */
            if ((qual_is(s, q, "Tensor.backward") && has(path, "torch/_tensor.py")) ||
                qual_is(s, q, "BackwardCFunction.apply"))
                backward = 1;
            /* activation checkpointing's recomputation (non-reentrant, the default since PyTorch
             * 2.4, and what transformers' gradient_checkpointing_enable uses): the forward runs
             * again inside the backward pass, on autograd's worker, from the unpack hook of a
             * saved tensor. Without this its tensors were activations, whose phase ended the
             * backward pass at the first recomputed block (the reentrant variant runs in
             * CheckpointFunction.backward, a .backward above) */
            if (has(path, "torch/utils/checkpoint.py") &&
                (has_within(s, q, "unpack_hook") || has_within(s, q, "recompute_fn")))
                backward = 1;
            /* activation offloading (torch.autograd.graph.save_on_cpu): its unpack hook copies
             * each saved tensor back to the GPU inside the backward pass. Without this the copies
             * were "inputs" (Python, a copy), whose phase ended the backward pass at each one and
             * made its live temporaries gradients: +196 MiB of "gradients the size of no
             * parameter" on ResNet-18 (train.py --offload, H200) */
            if (has(path, "torch/autograd/graph.py") && has_within(s, q, "unpack")) backward = 1;
            /* backward()'s seed, the loss's gradient (ones): kept by Python past the pass */
            if (qual_is(s, q, "_make_grads") && has(path, "torch/autograd/")) *seed = backward = 1;
        } else if (flags[i] & MT_FF_PSEUDO) {
            if (has(s, "[autograd backward]")) backward = 1;
        } else {
            unsigned b = native_says(c, s);
            ckpt |= (b & SAYS_CHECKPOINT) != 0;
            c->saw_sparse_grad |= (b & SAYS_SPARSE_GRAD) != 0;
            workspace |= (b & SAYS_WORKSPACE) != 0;
            grads |= (b & SAYS_GRADS) != 0;
            reducer |= (b & SAYS_REDUCER) != 0;
            backward |= (b & SAYS_BACKWARD) != 0;
            factory |= (b & SAYS_FACTORY) != 0;
        }
    }
    if (reducer) c->saw_parallel |= MT_SAW_DDP;
    if (workspace) return MT_CAT_WORKSPACE;
    if (compiling) return MT_CAT_COMPILATION; /* in a forward, a backward or a step alike */
    if (optim) return init_group ? MT_CAT_OPTIMIZER_STATE : MT_CAT_OPTIMIZER_TEMP;
    if (grads) {
        *no_phase = reducer && !backward;
        return MT_CAT_GRADIENTS;
    }
    if (unsharded) return MT_CAT_UNSHARDED;
    if (replicas) return MT_CAT_REPLICAS;
    if (backward) return MT_CAT_BACKWARD_TEMP;
    if (kv) return MT_CAT_KV_CACHE;
    if (params) return MT_CAT_PARAMETERS;
    if (ckpt) return MT_CAT_CHECKPOINT;
    if (augment || scattered) return MT_CAT_INPUTS;
    if (forward) return MT_CAT_ACTIVATIONS;
    if (gen) return MT_CAT_GENERATION; /* what generate() makes outside the model's forward */
    if (functional) return MT_CAT_ACTIVATIONS;
    if (py && factory) return MT_CAT_INPUTS;
    return MT_CAT_OTHER;
}

#define BY_ID_MAX (1u << 22) /* 4 MiB at most */

/* The by_id entry of stack, the array grown to hold it; NULL above BY_ID_MAX or out of memory. */
static uint8_t *by_id_entry(mt_categorizer *c, uint32_t stack)
{
    if (stack < c->n_by_id) return &c->by_id[stack];
    if (stack >= BY_ID_MAX) return NULL;
    size_t n = c->n_by_id ? c->n_by_id : 4096;
    while (n <= stack)
        n *= 2;
    uint8_t *v = realloc(c->by_id, n);
    if (!v) return NULL;
    memset(v + c->n_by_id, 0, n - c->n_by_id);
    c->by_id = v;
    c->n_by_id = n;
    return &v[stack];
}

enum { NO_PHASE = 1u << 6, SEED = 1u << 7, CATEGORY = NO_PHASE - 1 };

/* stack's cached byte (category + 1 | no phase << 6 | seed << 7), 0 when not categorized yet. */
static unsigned cached(const mt_categorizer *c, uint32_t stack)
{
    if (stack < c->n_by_id && c->by_id[stack]) return c->by_id[stack];
    const mt_u64map_slot *s = mt_u64map_find(&c->cache, stack); /* nearly always empty */
    return s ? (unsigned)s->a : 0;
}

unsigned mt_categorize(mt_categorizer *c, const mt_lifetime *l)
{
    if (l->kind != MT_KIND_TENSOR) return MT_CAT_NONE;
    unsigned b = cached(c, l->stack);
    if (b) return (b & CATEGORY) - 1u;
    int seed = 0, no_phase = 0;
    unsigned cat = l->stack ? from_stack(c, l->stack, &seed, &no_phase) : MT_CAT_OTHER;
    b = (cat + 1) | (no_phase ? NO_PHASE : 0) | (seed ? SEED : 0);
    uint8_t *e = by_id_entry(c, l->stack);
    mt_u64map_slot *s = e ? NULL : mt_u64map_upsert(&c->cache, l->stack);
    if (e)
        *e = (uint8_t)b;
    else if (s)
        s->a = b; /* else: categorized again next time (out of memory) */
    return cat;
}

/* The phase a category says the program is in, for the categories that say one. */
static int phase_of(unsigned cat)
{
    switch (cat) {
    case MT_CAT_PARAMETERS: case MT_CAT_ACTIVATIONS: case MT_CAT_KV_CACHE: case MT_CAT_INPUTS:
        return MT_PHASE_FORWARD;
    case MT_CAT_BACKWARD_TEMP: case MT_CAT_GRADIENTS: return MT_PHASE_BACKWARD;
    case MT_CAT_OPTIMIZER_TEMP: case MT_CAT_OPTIMIZER_STATE: return MT_PHASE_OPTIMIZER;
    default: return MT_PHASE_NONE; /* workspaces, other, user categories: any phase */
    }
}

/* What outlives its phase: a backward tensor still live when the backward pass has ended is a
 * gradient, an optimizer temporary still live when the step has ended is state. The tracker
 * asks for the tensors of the phase's temporary category only (it keeps them apart: a walk over
 * the whole live set at every phase end made alternating phases quadratic). */
unsigned mt_categorizer_promote(mt_categorizer *c, int phase, const mt_lifetime *l)
{
    if (phase == MT_PHASE_BACKWARD && l->category == MT_CAT_BACKWARD_TEMP)
        return cached(c, l->stack) & SEED ? l->category : MT_CAT_GRADIENTS;
    if (phase == MT_PHASE_OPTIMIZER && l->category == MT_CAT_OPTIMIZER_TEMP) {
        c->saw_state = 1;
        return MT_CAT_OPTIMIZER_STATE;
    }
    return l->category;
}

static int end_phase(mt_categorizer *c)
{
    int ended = c->phase;
    if (ended == MT_PHASE_BACKWARD) c->backward_ends++;
    else if (ended == MT_PHASE_OPTIMIZER) c->optimizer_ends++, c->saw_step_end = 1;
    else ended = MT_PHASE_NONE;
    return ended;
}

static int of_backward(const mt_categorizer *c, uint32_t tid)
{
    if (!c->n_backward_tids) return tid == c->seed_tid;
    for (unsigned i = 0; i < c->n_backward_tids; i++)
        if (c->backward_tids[i] == tid) return 1;
    return 0;
}

/* tid made a tensor of the backward pass (seed: backward()'s seed) */
static void join_backward(mt_categorizer *c, uint32_t tid, int seed)
{
    const unsigned cap = sizeof c->backward_tids / sizeof *c->backward_tids;
    if (seed) {
        if (!c->n_backward_tids) c->seed_tid = tid;
    } else if (!c->n_backward_tids || !of_backward(c, tid)) {
        /* beyond 16 devices' threads, one of those known is forgotten (its next free ends
         * the pass) */
        c->backward_tids[c->n_backward_tids < cap ? c->n_backward_tids++ : tid % cap] = tid;
    }
}

/* The backward pass of a CUDA model runs on autograd's device threads while the thread that called
 * backward() waits: it has ended at the first tensor event of another thread (SGD's step allocates
 * nothing, and zero_grad's frees may be the first sign). Other phases end when a tensor of another
 * phase is allocated. With one thread remembered, a model on two GPUs (train.py --data-parallel,
 * 2 x H200) ended its backward pass each time the other device's thread took over, and promoted
 * the other's temporaries to gradients. */
int mt_categorizer_phase(mt_categorizer *c, const mt_lifetime *alloc, uint32_t tid)
{
    unsigned b = alloc ? cached(c, alloc->stack) : 0;
    int ph = alloc && !(b & NO_PHASE) ? phase_of(alloc->category) : MT_PHASE_NONE;
    int ended = MT_PHASE_NONE;
    if (alloc && alloc->category == MT_CAT_OPTIMIZER_STATE)
        c->saw_state = 1; /* made as state (_init_group) */
    if (c->phase == MT_PHASE_BACKWARD) {
        if (ph == MT_PHASE_BACKWARD) {
            join_backward(c, tid, (b & SEED) != 0);
            return MT_PHASE_NONE;
        }
        if (ph == MT_PHASE_NONE && of_backward(c, tid)) return MT_PHASE_NONE;
        ended = end_phase(c);
    } else if (ph != MT_PHASE_NONE && ph != c->phase) {
        ended = end_phase(c);
    }
    if (ph != MT_PHASE_NONE) c->phase = ph;
    if (ph == MT_PHASE_BACKWARD) {
        c->n_backward_tids = 0;
        c->seed_tid = 0;
        join_backward(c, tid, (b & SEED) != 0);
        c->saw_backward = 1;
    }
    return ended;
}

void mt_categorizer_restart(mt_categorizer *c)
{
    c->phase = MT_PHASE_NONE;
    c->n_backward_tids = 0;
    c->seed_tid = 0;
    c->backward_ends = c->optimizer_ends = 0;
    c->saw_step_end = c->saw_state = 0;
}

void mt_categorizer_watch(mt_categorizer *c)
{
    c->watching = 1;
}

void mt_categorizer_blind(mt_categorizer *c)
{
    c->blind = 1;
}

int mt_categorizer_check(mt_categorizer *c)
{
    int same = c->watching && !c->blind && !c->watch_failed;
    for (size_t i = 0; same && i < c->watched.cap; i++) {
        const mt_u64map_slot *w = &c->watched.slots[i];
        if (w->used) same = mt_frames_path_hash(c->f, (uint32_t)w->key, MT_NAME_SHORT) == w->a;
    }
    c->watching = 0;
    mt_u64map_destroy(&c->watched);
    return same;
}

void mt_categorizer_forget(mt_categorizer *c)
{
    mt_u64map_destroy(&c->cache);
    free(c->by_id);
    c->by_id = NULL;
    c->n_by_id = 0;
    mt_u64map_destroy(&c->watched);
    c->watching = c->blind = c->watch_failed = 0;
    c->optimizer[0] = 0;
    c->optimizer_kind_w = 0;
    mt_categorizer_restart(c);
}

void mt_categorizer_phases(const mt_categorizer *c, uint64_t *backward_ends,
                           uint64_t *optimizer_ends)
{
    *backward_ends = c->backward_ends;
    *optimizer_ends = c->optimizer_ends;
}

int mt_categorizer_saw_backward(const mt_categorizer *c)
{
    return c->saw_backward;
}

int mt_categorizer_saw_sparse_grad(const mt_categorizer *c)
{
    return c->saw_sparse_grad;
}

unsigned mt_categorizer_saw_parallel(const mt_categorizer *c)
{
    return c->saw_parallel;
}

const char *mt_categorizer_optimizer(const mt_categorizer *c, uint64_t *state_in_w)
{
    if (state_in_w) *state_in_w = c->optimizer_kind_w;
    return c->optimizer[0] ? c->optimizer : NULL;
}

int mt_categorizer_stateless(const mt_categorizer *c)
{
    return c->optimizer[0] && c->saw_step_end && !c->saw_state;
}

/* ---- How a category's tensors compare with the parameters -------------------------------------- */

static int cmp_u64_desc(const void *pa, const void *pb)
{
    uint64_t a = *(const uint64_t *)pa, b = *(const uint64_t *)pb;
    return a > b ? -1 : a < b;
}

/* Largest-first lists; params may be paired `copies` times each. Exact sizes pair first, then each
 * remaining tensor, largest first, with the remaining parameter nearest in size, larger or not, if
 * the difference is at most MT_FIT_SLACK (compact.h): the caching allocator hands out a whole
 * block when splitting it would leave less than 1 MiB, and rounds sizes over 10 MiB up to 2 MiB,
 * so either block may be the larger (a fine-tuned ResNet-18's fc.weight, 2 048 000 bytes, sat in a 2 MiB
 * block and its gradients in blocks of their own size: nearest-not-larger paired them with a
 * frozen 1.1 MiB convolution). Ties go to the parameter not larger. */

int mt_category_fit_compute(const uint64_t *params, size_t np, const uint64_t *sizes, size_t n,
                            unsigned copies, mt_category_fit *out)
{
    memset(out, 0, sizeof *out);
    if (!n) return 0;
    uint64_t *p = malloc((np ? np : 1) * sizeof *p), *t = malloc(n * sizeof *t);
    unsigned *left = calloc(np ? np : 1, sizeof *left);
    uint8_t *done = calloc(n, 1);
    if (!p || !t || !left || !done) {
        free(p), free(t), free(left), free(done);
        return -1;
    }
    if (np) memcpy(p, params, np * sizeof *p); /* params may be NULL when np is 0 */
    memcpy(t, sizes, n * sizeof *t);
    qsort(p, np, sizeof *p, cmp_u64_desc);
    qsort(t, n, sizeof *t, cmp_u64_desc);
    for (size_t i = 0; i < np; i++) left[i] = copies;
    /* exact: a merge of the two sorted lists */
    for (size_t i = 0, j = 0; i < n && j < np;) {
        if (t[i] > p[j]) i++;
        else if (t[i] < p[j]) j++;
        else if (!left[j]) j++;
        else {
            left[j]--;
            done[i++] = 1;
            out->paired += p[j];
            out->n_paired++;
        }
    }
    /* the rest: p[j..] are the parameters not larger than t[i] (a pointer that only moves on, as
     * t falls); the nearest of those with pairings left, and the nearest larger one, before j */
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        if (done[i]) continue;
        while (j < np && p[j] > t[i]) j++;
        size_t below = j, above = j;
        while (below < np && !left[below]) below++;
        while (above > 0 && !left[above - 1]) above--;
        int has_below = below < np && t[i] - p[below] <= MT_FIT_SLACK;
        int has_above = above > 0 && p[above - 1] - t[i] <= MT_FIT_SLACK;
        if (has_above && has_below) { /* the nearer; a tie to the one not larger */
            if (p[above - 1] - t[i] >= t[i] - p[below]) has_above = 0;
            else has_below = 0;
        }
        if (has_below) {
            left[below]--;
            out->paired += p[below];
            out->n_paired++;
            out->larger += t[i] - p[below];
            out->n_larger++;
        } else if (has_above) {
            left[above - 1]--;
            out->paired += t[i];
            out->n_paired++;
            out->smaller += p[above - 1] - t[i];
            out->n_smaller++;
        } else {
            out->unpaired += t[i];
            out->n_unpaired++;
        }
    }
    for (size_t i = 0; i < np; i++) {
        out->params_left += left[i] * p[i];
        out->n_params_left += left[i];
    }
    free(p), free(t), free(left), free(done);
    return 0;
}
