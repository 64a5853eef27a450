/* Training-memory categories (record --tensors): the rules on synthetic training steps whose
 * answer is known by construction, the pairing of gradients and state with parameters, a user's
 * rules file, the exports (text, JSON, folded --by category, Chrome "by category"), and the
 * GPU-recorded fixtures of tests/data against what PyTorch itself measured there (the .json
 * beside each trace: parameter, gradient and optimizer-state bytes as numel * element_size). */
#include <math.h>
#include <sys/stat.h>

#include "synth_file.h"
#include "test_compact_fixture.h"

#define A ((uint64_t)0x7f0000000000)
#define MiB (1024ull * 1024ull)
#define PY(code, line) MT_PY_IP(code, line)
#define MAIN_TID 7
#define AUTOGRAD_TID 9

static int fx_chrome_fn(mt_out *o, mt_analysis *a, void *ctx)
{
    (void)ctx;
    char err[256];
    mt_chrome_options co = {0};
    return mt_export_chrome(o, &a, 1, &co, err, sizeof err);
}

static void pycode(fx *f, uint32_t id, const char *file, const char *qual)
{
    mt_record r = {.type = MT_REC_PYCODE};
    r.u.pycode = (mt_pycode){.id = id, .firstlineno = 1, .filename = file, .qualname = qual};
    fx_put(f, &r);
}

static void tensor(fx *f, unsigned op, uint64_t addr, uint64_t bytes, uint64_t t_ms,
                   uint32_t stack, uint32_t tid)
{
    mt_record r = {.type = MT_REC_EVENT};
    r.u.event = (mt_event){.time_ns = FX_T0 + t_ms * MS, .address = addr, .bytes = bytes,
                           .tid = tid, .context = 1, .stack = stack, .device = 0,
                           .op = (uint8_t)op, .kind = MT_KIND_TENSOR};
    fx_put(f, &r);
}

/* Stacks (leaf ids):
 *   1 train.py <module>            2 -> Module._apply (module.py): parameters
 *   3 -> Module._call_impl -> 4 Linear.forward: activations
 *   5 -> Tensor.backward -> 6 _make_grads: backward's seed
 *   10 [autograd backward] (the autograd thread): backward tensors
 *   20 -> Adam.step (adam.py) -> 21 Adam._init_group: state; 22 _multi_tensor_adam: temporaries
 *   30 -> SGD.step (sgd.py) -> 31 _multi_tensor_sgd: momentum made in the first step
 *   40 -> randn (a Python frame and at::_ops::randn): an input
 *   50 -> my_lib.alloc (a user's rule) */
static void stacks(fx *f)
{
    fx_module(f, 1, "/opt/torch/lib/libtorch_cpu.so", 0x500000, 0x510000);
    fx_symbol(f, 0x500100, 0, "at::_ops::randn::call(c10::ArrayRef<long>)", "", 0);
    pycode(f, 1, "/home/u/train.py", "<module>");
    pycode(f, 2, "/venv/lib/python3.12/site-packages/torch/nn/modules/module.py", "Module._apply");
    pycode(f, 3, "/venv/lib/python3.12/site-packages/torch/nn/modules/module.py", "Module._call_impl");
    pycode(f, 4, "/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py", "Linear.forward");
    pycode(f, 5, "/venv/lib/python3.12/site-packages/torch/_tensor.py", "Tensor.backward");
    pycode(f, 6, "/venv/lib/python3.12/site-packages/torch/autograd/__init__.py", "_make_grads");
    pycode(f, 7, "/venv/lib/python3.12/site-packages/torch/optim/adam.py", "Adam.step");
    pycode(f, 8, "/venv/lib/python3.12/site-packages/torch/optim/adam.py", "Adam._init_group");
    pycode(f, 9, "/venv/lib/python3.12/site-packages/torch/optim/adam.py", "_multi_tensor_adam");
    pycode(f, 10, "/venv/lib/python3.12/site-packages/torch/optim/sgd.py", "SGD.step");
    pycode(f, 11, "/venv/lib/python3.12/site-packages/torch/optim/sgd.py", "_multi_tensor_sgd");
    pycode(f, 12, "/home/u/my_lib.py", "my_lib.alloc");
    fx_node(f, 1, 0, PY(1, 10), MT_FRAME_PYTHON);
    fx_node(f, 2, 1, PY(2, 900), MT_FRAME_PYTHON);
    fx_node(f, 3, 1, PY(3, 1790), MT_FRAME_PYTHON);
    fx_node(f, 4, 3, PY(4, 125), MT_FRAME_PYTHON);
    fx_node(f, 5, 1, PY(5, 630), MT_FRAME_PYTHON);
    fx_node(f, 6, 5, PY(6, 230), MT_FRAME_PYTHON);
    fx_node(f, 10, 0, MT_PSEUDO_AUTOGRAD, MT_FRAME_PSEUDO);
    fx_node(f, 20, 1, PY(7, 240), MT_FRAME_PYTHON);
    fx_node(f, 21, 20, PY(8, 180), MT_FRAME_PYTHON);
    fx_node(f, 22, 20, PY(9, 600), MT_FRAME_PYTHON);
    fx_node(f, 30, 1, PY(10, 120), MT_FRAME_PYTHON);
    fx_node(f, 31, 30, PY(11, 400), MT_FRAME_PYTHON);
    fx_node(f, 40, 1, PY(1, 20), MT_FRAME_PYTHON);
    fx_node(f, 41, 40, 0x500100, MT_FRAME_NATIVE);
    fx_node(f, 50, 1, PY(12, 3), MT_FRAME_PYTHON);
}

/* Two Adam steps of a model with parameters of 4 MiB and 1 MiB (W = 5 MiB). In MiB, in use:
 *   params 5; input 1 -> 6; activations 3 + 2 -> 11; backward (autograd thread): seed (main
 *   thread, 512 B), gradient 4 -> 15, temporary 1 -> 16, frees the activations and the
 *   temporary -> 10, gradient 1 -> 11; optimizer (main thread, the backward pass has ended):
 *   state 4 + 4 + 1 + 1 (the first 4 MiB state in a 4.5 MiB block) -> 21.5, a temporary 6 ->
 *   27.5 (+ the seed's 512 B) = THE PEAK, freed -> 21.5; zero_grad frees the gradients -> 16.5,
 *   the input -> 15.5. Step 2: the same forward and backward (no new state; at most 26.5). */
static void adam_trace_of(fx *f, const char *name, int second_grad)
{
    fx_open(f, name);
    fx_process(f, "python3", "python3 train.py");
    stacks(f);
    uint64_t t = 1;
    tensor(f, MT_OP_ALLOC, A + 0x000, 4 * MiB, t++, 2, MAIN_TID);
    tensor(f, MT_OP_ALLOC, A + 0x100, 1 * MiB, t++, 2, MAIN_TID);
    for (int step = 0; step < 2; step++) {
        uint64_t o = (uint64_t)step << 32;
        tensor(f, MT_OP_ALLOC, A + o + 0x200, 1 * MiB, t++, 41, MAIN_TID); /* input */
        tensor(f, MT_OP_ALLOC, A + o + 0x300, 3 * MiB, t++, 4, MAIN_TID);
        tensor(f, MT_OP_ALLOC, A + o + 0x400, 2 * MiB, t++, 4, MAIN_TID);
        tensor(f, MT_OP_ALLOC, A + o + 0x500, 512, t++, 6, MAIN_TID);        /* the seed */
        tensor(f, MT_OP_ALLOC, A + o + 0x600, 4 * MiB, t++, 10, AUTOGRAD_TID); /* -> .grad */
        tensor(f, MT_OP_ALLOC, A + o + 0x700, 1 * MiB, t++, 10, AUTOGRAD_TID); /* temporary */
        tensor(f, MT_OP_FREE, A + o + 0x300, 0, t++, 0, AUTOGRAD_TID);
        tensor(f, MT_OP_FREE, A + o + 0x400, 0, t++, 0, AUTOGRAD_TID);
        tensor(f, MT_OP_FREE, A + o + 0x700, 0, t++, 0, AUTOGRAD_TID);
        if (step == 0 || second_grad)
            tensor(f, MT_OP_ALLOC, A + o + 0x800, 1 * MiB, t++, 10, AUTOGRAD_TID); /* -> .grad */
        if (step == 0) {
            tensor(f, MT_OP_ALLOC, A + 0x900, 4 * MiB + MiB / 2, t++, 21, MAIN_TID);
            tensor(f, MT_OP_ALLOC, A + 0xa00, 4 * MiB, t++, 21, MAIN_TID);
            tensor(f, MT_OP_ALLOC, A + 0xb00, 1 * MiB, t++, 21, MAIN_TID);
            tensor(f, MT_OP_ALLOC, A + 0xc00, 1 * MiB, t++, 21, MAIN_TID);
            tensor(f, MT_OP_ALLOC, A + 0xd00, 6 * MiB, t++, 22, MAIN_TID);
            tensor(f, MT_OP_FREE, A + 0xd00, 0, t++, 0, MAIN_TID);
            tensor(f, MT_OP_FREE, A + o + 0x600, 0, t++, 0, MAIN_TID); /* zero_grad */
            tensor(f, MT_OP_FREE, A + o + 0x800, 0, t++, 0, MAIN_TID);
        }
        tensor(f, MT_OP_FREE, A + o + 0x200, 0, t++, 0, MAIN_TID);
    }
    fx_end(f, t, 0, 0);
    fx_close(f);
}

static void adam_trace(fx *f) { adam_trace_of(f, "categories.mtrace", 1); }

Test(categories, adam_step_by_construction)
{
    fx f;
    adam_trace(&f);
    mt_analysis *a = fx_analyze(f.path);
    const mt_device_report *d = fx_dev(a, 0);
    cr_assert(a->categories, "a trace with tensors has categories");
    uint64_t k = 0;
    cr_expect_str_eq(mt_categorizer_optimizer(a->categories, &k), "Adam or AdamW");
    cr_expect_eq(k, 2);
    cr_expect_eq(d->u.peak, 27 * MiB + MiB / 2 + 512, "the peak: step 1's optimizer step");
    cr_assert(d->categories_known);
    const uint64_t *c = d->by_category_at_peak;
    cr_expect_eq(c[MT_CAT_PARAMETERS], 5 * MiB);
    cr_expect_eq(c[MT_CAT_GRADIENTS], 5 * MiB, "backward tensors alive after the pass");
    cr_expect_eq(c[MT_CAT_OPTIMIZER_STATE], 10 * MiB + MiB / 2, "_init_group");
    cr_expect_eq(c[MT_CAT_OPTIMIZER_TEMP], 6 * MiB, "freed within the step");
    cr_expect_eq(c[MT_CAT_BACKWARD_TEMP], 512, "the seed is never a gradient");
    cr_expect_eq(c[MT_CAT_INPUTS], 1 * MiB);
    cr_expect_eq(c[MT_CAT_ACTIVATIONS], 0);
    uint64_t sum = 0;
    for (unsigned i = 0; i < MT_CAT_MAX; i++) sum += c[i];
    cr_expect_eq(sum, d->by_kind_at_peak[MT_KIND_TENSOR], "the categories add up to the tensors");
    /* state against the parameters: 4 exact, one block 0.5 MiB larger */
    cr_expect_eq(d->fit_at_peak[1].paired, 10 * MiB);
    cr_expect_eq(d->fit_at_peak[1].larger, MiB / 2);
    cr_expect_eq(d->fit_at_peak[1].n_larger, 1);
    cr_expect_eq(d->fit_at_peak[1].n_unpaired + d->fit_at_peak[1].n_params_left, 0);
    cr_expect_eq(d->fit_at_peak[0].paired, 5 * MiB);
    /* when the first backward pass after the peak has ended (step 2's): every gradient live */
    cr_assert(d->after_backward_known);
    cr_expect_eq(d->by_category_after_backward[MT_CAT_GRADIENTS], 5 * MiB);
    cr_expect_eq(d->by_category_after_backward[MT_CAT_BACKWARD_TEMP], 1024, "two seeds");
    cr_expect_eq(d->by_category_after_backward[MT_CAT_ACTIVATIONS], 0);
    /* peak stacks carry their categories and add up to the peak */
    uint64_t grads = 0, all = 0;
    for (size_t i = 0; i < d->peak_stacks.n; i++) {
        all += d->peak_stacks.v[i].bytes;
        if (d->peak_stacks.v[i].category == MT_CAT_GRADIENTS) grads += d->peak_stacks.v[i].bytes;
    }
    cr_expect_eq(all, d->u.peak);
    cr_expect_eq(grads, 5 * MiB);
    fx_check_invariants(a);
    mt_analysis_free(a);
}

/* The table's row of tensor category cat, NULL if it has none; there is never a second. */
static const mt_cat_row *table_row(const mt_cat_table *t, unsigned cat)
{
    const mt_cat_row *r = NULL;
    for (size_t i = 0; i < t->n; i++)
        if (!t->rows[i].outside && t->rows[i].category == cat) {
            cr_assert_null(r, "two rows of category %u", cat);
            r = &t->rows[i];
        }
    return r;
}

/* The table: textbook W + W + 2W, differences explained, rows adding up. */
Test(categories, table_and_exports)
{
    fx f;
    adam_trace(&f);
    mt_analysis *a = fx_analyze(f.path);
    const mt_device_report *d = fx_dev(a, 0);
    mt_cat_table t;
    cr_assert_eq(mt_category_table(a, d, &t), 0);
    cr_assert(t.known);
    cr_expect_eq(t.w, 5 * MiB);
    const mt_cat_row *state = table_row(&t, MT_CAT_OPTIMIZER_STATE);
    const mt_cat_row *grads = table_row(&t, MT_CAT_GRADIENTS);
    uint64_t tensors = 0;
    for (size_t i = 0; i < t.n; i++)
        if (!t.rows[i].outside) tensors += t.rows[i].bytes;
    cr_expect_eq(tensors, t.tensors);
    cr_expect_eq(t.tensors, d->by_kind_at_peak[MT_KIND_TENSOR]);
    cr_assert(state && grads);
    cr_expect_eq(state->textbook, 10 * MiB);
    cr_expect_eq(state->difference, (int64_t)(MiB / 2));
    cr_expect(strstr(state->why, "blocks larger"), "%s", state->why);
    cr_expect_eq(grads->difference, 0);
    /* text and JSON */
    char *text = fx_capture(a, fx_report_text_fn, NULL, ".txt");
    cr_expect(strstr(text, "by category at the peak"), "%s", text);
    cr_expect(strstr(text, "optimizer state"));
    free(text);
    char *json = fx_capture(a, fx_report_json_fn, NULL, ".json");
    cr_expect(strstr(json, "\"categories_at_peak\":{\"optimizer\":\"Adam or AdamW\""), "%s", json);
    cr_expect(strstr(json, "\"category\":\"gradients\""));
    free(json);
    /* folded --by category: each category's lines add up to its bytes at the peak */
    mt_folded_options fo = {.metric = MT_METRIC_PEAK, .device = 0, .by_category = 1};
    char *folded = fx_capture(a, fx_folded_fn, &fo, ".folded");
    uint64_t by_cat[MT_CAT_MAX] = {0}, other = 0;
    for (char *line = strtok(folded, "\n"); line; line = strtok(NULL, "\n")) {
        char *semi = strchr(line, ';'), *sp = strrchr(line, ' ');
        cr_assert(semi && sp);
        *semi = 0;
        uint64_t v = strtoull(sp + 1, NULL, 10);
        int found = 0;
        for (unsigned c = 1; c < mt_category_count(a->categories); c++)
            if (strcmp(line, mt_category_name(a->categories, c)) == 0) by_cat[c] += v, found = 1;
        if (!found) {
            cr_expect_str_eq(line, "not a tensor");
            other += v;
        }
    }
    for (unsigned c = 1; c < MT_CAT_MAX; c++) cr_expect_eq(by_cat[c], d->by_category_at_peak[c]);
    cr_expect_eq(other, 0);
    free(folded);
    /* Chrome: the "by category" counter at the peak's time holds the peak's tensors (the
     * categories of that moment: gradients already promoted, temporaries still temporaries) */
    char *chrome = fx_capture(a, fx_chrome_fn, NULL, ".json");
    cr_expect(strstr(chrome, "\"name\":\"cuda:0 by category\""), "a category track");
    cr_expect(strstr(chrome, "\"optimizer state\":11010048"), "10.5 MiB of state at a point");
    cr_expect(strstr(chrome, "\"category\":\"optimizer temporaries\""), "slices carry it");
    free(chrome);
    mt_analysis_free(a);
}

/* Three SGD steps with momentum: parameters, then per step a forward's activation, the backward
 * pass's gradient (autograd's thread), the momentum buffer in the first step, zero_grad's free.
 * `tail`: then a fourth step's forward that frees the momentum buffer (live at the peak) and
 * fails. */
static void sgd_trace_of(fx *f, const char *name, int tail, int momentum)
{
    fx_open(f, name);
    stacks(f);
    uint64_t t = 1;
    tensor(f, MT_OP_ALLOC, A, 4 * MiB, t++, 2, MAIN_TID);
    for (int step = 0; step < 3; step++) {
        uint64_t o = (uint64_t)(step + 1) << 32;
        /* without momentum the activations grow a MiB a step: the peak is the last step's,
         * after two steps that left no state */
        tensor(f, MT_OP_ALLOC, A + o + 0x100, 8 * MiB + (momentum ? 0 : (uint64_t)step * MiB), t++,
               4, MAIN_TID);
        tensor(f, MT_OP_FREE, A + o + 0x100, 0, t++, 0, AUTOGRAD_TID);
        tensor(f, MT_OP_ALLOC, A + o + 0x200, 4 * MiB, t++, 10, AUTOGRAD_TID);
        if (step == 0 && momentum) tensor(f, MT_OP_ALLOC, A + 0x300, 4 * MiB, t++, 31, MAIN_TID);
        if (!momentum) { /* a weight decay's temporary, dead within the step */
            tensor(f, MT_OP_ALLOC, A + o + 0x300, 4 * MiB, t++, 31, MAIN_TID);
            tensor(f, MT_OP_FREE, A + o + 0x300, 0, t++, 0, MAIN_TID);
        }
        tensor(f, MT_OP_FREE, A + o + 0x200, 0, t++, 0, MAIN_TID); /* zero_grad */
    }
    if (tail) {
        tensor(f, MT_OP_ALLOC, A + 0x400, 2 * MiB, t++, 4, MAIN_TID);
        tensor(f, MT_OP_FREE, A + 0x300, 0, t++, 0, MAIN_TID);
        tensor(f, MT_OP_FAILED, 0, 64 * MiB, t++, 4, MAIN_TID);
    }
    fx_close(f);
}

static void sgd_trace(fx *f, const char *name, int tail) { sgd_trace_of(f, name, tail, 1); }

/* SGD with momentum makes its buffers in the first step, not in _init_group: what outlives the
 * step is state. The backward pass ends at zero_grad's first free (SGD's step allocates nothing).
 */
Test(categories, sgd_momentum_made_in_the_step)
{
    fx f;
    sgd_trace(&f, "sgd.mtrace", 0);
    mt_analysis *a = fx_analyze(f.path);
    const mt_device_report *d = fx_dev(a, 0);
    uint64_t k = 0;
    cr_expect_str_eq(mt_categorizer_optimizer(a->categories, &k), "SGD (momentum)");
    cr_expect_eq(k, 1);
    /* the peak: step 2's forward, 4 + 4 (momentum) + 8 (step 1 reached 12) */
    cr_expect_eq(d->u.peak, 16 * MiB);
    cr_expect_eq(d->by_category_at_peak[MT_CAT_OPTIMIZER_STATE], 4 * MiB);
    cr_expect_eq(d->by_category_at_peak[MT_CAT_ACTIVATIONS], 8 * MiB);
    cr_assert(d->after_backward_known);
    cr_expect_eq(d->by_category_after_backward[MT_CAT_GRADIENTS], 4 * MiB,
                 "the gradient is live until zero_grad: the backward pass ended at its free");
    cr_expect_eq(d->by_category_after_backward[MT_CAT_BACKWARD_TEMP], 0);
    mt_analysis_free(a);
}

/* Plain SGD keeps no state: its steps' tensors (a weight decay's) die in the step, so its textbook
 * state is none, not the W of torch/optim/sgd.py's momentum (a ResNet-18 trained so on an H200 read
 * "-44.69 MiB" of state). Known once a step has ended before the backward pass after the peak (so
 * that one pass and two agree); a peak in the first step keeps the file's W. */
Test(categories, sgd_without_momentum_keeps_no_state)
{
    fx f;
    sgd_trace_of(&f, "sgd0.mtrace", 0, 0);
    mt_analysis *a = fx_analyze(f.path);
    const mt_device_report *d = fx_dev(a, 0);
    cr_expect(d->optimizer_stateless, "a step had ended with no state when the backward pass "
                                      "after the peak ended");
    cr_expect_eq(d->by_category_at_peak[MT_CAT_OPTIMIZER_STATE], 0);
    mt_cat_table t;
    cr_assert_eq(mt_category_table(a, d, &t), 0);
    cr_expect_str_eq(t.optimizer, "SGD (no momentum)");
    cr_expect_eq(t.state_in_w, 0);
    const mt_cat_row *r = table_row(&t, MT_CAT_OPTIMIZER_STATE);
    cr_assert(r);
    cr_expect(r->has_textbook && r->textbook == 0, "%s", r->why);
    cr_expect(strstr(r->why, "no state"), "%s", r->why);
    mt_analysis_free(a);
}

/* A user's rules come first; a new name makes a category; a bad line is an error with its place. */
Test(categories, user_rules)
{
    fx f;
    fx_open(&f, "rules.mtrace");
    stacks(&f);
    tensor(&f, MT_OP_ALLOC, A, 4 * MiB, 1, 2, MAIN_TID);
    tensor(&f, MT_OP_ALLOC, A + 0x100, 2 * MiB, 2, 50, MAIN_TID);
    tensor(&f, MT_OP_ALLOC, A + 0x200, 1 * MiB, 3, 4, MAIN_TID);
    fx_close(&f);
    char rules[512];
    mt_test_tmpname(rules, sizeof rules, "rules.txt");
    FILE *r = fopen(rules, "w");
    cr_assert(r);
    fputs("# my framework\nkv cache <- my_lib.alloc\n\nparameters<-Linear.forward\n", r);
    fclose(r);
    mt_analysis *a;
    char err[256];
    mt_analyze_options o = {.category_rules = rules};
    cr_assert_eq(mt_analyze(f.path, &o, &a, err, sizeof err), 0, "%s", err);
    const mt_device_report *d = fx_dev(a, 0);
    cr_expect_eq(mt_category_count(a->categories), MT_CAT_BUILTIN_ + 1);
    cr_expect_str_eq(mt_category_name(a->categories, MT_CAT_BUILTIN_), "kv cache");
    cr_expect_eq(d->by_category_at_peak[MT_CAT_BUILTIN_], 2 * MiB);
    cr_expect_eq(d->by_category_at_peak[MT_CAT_PARAMETERS], 5 * MiB, "a built-in name reused");
    cr_expect_eq(d->by_category_at_peak[MT_CAT_ACTIVATIONS], 0);
    mt_analysis_free(a);
    r = fopen(rules, "w");
    fputs("ok <- x\nno arrow here\n", r);
    fclose(r);
    cr_expect_eq(mt_analyze(f.path, &o, &a, err, sizeof err), -1);
    cr_expect(strstr(err, ":2: want 'CATEGORY <- PATTERN'"), "%s", err);
}

/* A failed request says what its GPU's live tensors were for at that moment (by_category, the
 * categories then: the backward pass has not ended, so its gradient is a backward temporary),
 * each failure its own moment, their sum PyTorch's memory_allocated() then; a host request none. */
Test(categories, failed_requests_say_what_the_tensors_were_for)
{
    fx f;
    fx_open(&f, "failed_categories.mtrace");
    stacks(&f);
    tensor(&f, MT_OP_ALLOC, A + 0x000, 5 * MiB, 1, 2, MAIN_TID);  /* parameters */
    tensor(&f, MT_OP_ALLOC, A + 0x100, 1 * MiB, 2, 41, MAIN_TID); /* input */
    tensor(&f, MT_OP_ALLOC, A + 0x200, 3 * MiB, 3, 4, MAIN_TID);  /* activations */
    tensor(&f, MT_OP_ALLOC, A + 0x300, 512, 4, 6, MAIN_TID);      /* backward's seed */
    tensor(&f, MT_OP_ALLOC, A + 0x400, 4 * MiB, 5, 10, AUTOGRAD_TID);
    tensor(&f, MT_OP_FAILED, 0, 8 * MiB, 6, 10, AUTOGRAD_TID);          /* #1 */
    tensor(&f, MT_OP_FREE, A + 0x200, 0, 7, 0, AUTOGRAD_TID);           /* the activations go */
    tensor(&f, MT_OP_FAILED, 0, 8 * MiB, 8, 10, AUTOGRAD_TID);          /* #2 */
    fx_ev(&f, MT_OP_FAILED, MT_KIND_HOST_PINNED, -1, 0, 2 * MiB, 9, 1); /* #3: host memory */
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    cr_assert_eq(a->n_failed, 3);
    const mt_failed_request *r = a->failed;
    cr_assert(r[0].categories_known && r[1].categories_known);
    cr_expect_eq(r[0].by_category[MT_CAT_PARAMETERS], 5 * MiB);
    cr_expect_eq(r[0].by_category[MT_CAT_INPUTS], 1 * MiB);
    cr_expect_eq(r[0].by_category[MT_CAT_ACTIVATIONS], 3 * MiB);
    cr_expect_eq(r[0].by_category[MT_CAT_BACKWARD_TEMP], 4 * MiB + 512);
    cr_expect_eq(r[0].by_category[MT_CAT_GRADIENTS], 0, "the pass has not ended");
    cr_expect_eq(r[1].by_category[MT_CAT_ACTIVATIONS], 0, "freed between the two");
    cr_expect_eq(r[1].by_category[MT_CAT_PARAMETERS], 5 * MiB);
    cr_expect(!r[2].categories_known, "host memory");
    char *text = fx_capture(a, fx_report_text_fn, NULL, ".txt");
    cr_expect(strstr(text, "     tensors live at that moment, 13.00 MiB, by what they were for "
                           "then:\n"
                           "        38.5%    5.00 MiB  parameters\n"
                           "        30.8%    4.00 MiB  backward temporaries\n"
                           "        23.1%    3.00 MiB  activations\n"
                           "         7.7%    1.00 MiB  inputs\n"),
              "%s", text);
    free(text);
    char *json = fx_capture(a, fx_report_json_fn, NULL, ".json");
    cr_expect(strstr(json, "\"by_category\":[{\"name\":\"parameters\",\"bytes\":5242880},"
                           "{\"name\":\"backward temporaries\",\"bytes\":4194816},"
                           "{\"name\":\"inputs\",\"bytes\":1048576}],"),
              "the second, without activations: %s", json);
    cr_expect(strstr(json, "\"by_category\":null,"), "the host request: %s", json);
    free(json);
    mt_analysis_free(a);
}

/* Pass 2 is done with the peak's categories two steps before the failure, and reads on for it
 * alone (failure_replay.c): the peak's figures are those of the trace without the failure (the
 * momentum buffer, live at the peak and freed after pass 2 was done, counted once), and the
 * failure has the categories of its own moment. */
Test(categories, a_failure_after_the_peak_is_settled)
{
    fx plain, failing;
    sgd_trace(&plain, "sgd_plain.mtrace", 0);
    sgd_trace(&failing, "sgd_failing.mtrace", 1);
    mt_analysis *p = fx_analyze(plain.path), *a = fx_analyze(failing.path);
    const mt_device_report *dp = fx_dev(p, 0), *d = fx_dev(a, 0);
    cr_expect_eq(d->u.peak, 16 * MiB);
    cr_expect_eq(d->u.peak_seq, dp->u.peak_seq);
    cr_expect_eq(d->by_category_at_peak[MT_CAT_OPTIMIZER_STATE], 4 * MiB, "counted once");
    cr_expect_arr_eq(d->by_category_at_peak, dp->by_category_at_peak,
                     sizeof d->by_category_at_peak);
    cr_expect_arr_eq(d->by_category_after_backward, dp->by_category_after_backward,
                     sizeof d->by_category_after_backward);
    cr_assert_eq(d->peak_stacks.n, dp->peak_stacks.n);
    for (size_t i = 0; i < d->peak_stacks.n; i++) {
        cr_expect_eq(d->peak_stacks.v[i].stack, dp->peak_stacks.v[i].stack);
        cr_expect_eq(d->peak_stacks.v[i].bytes, dp->peak_stacks.v[i].bytes);
        cr_expect_eq(d->peak_stacks.v[i].category, dp->peak_stacks.v[i].category);
    }
    cr_assert_eq(a->n_failed, 1);
    const mt_failed_request *r = &a->failed[0];
    cr_assert(r->categories_known);
    cr_expect_eq(r->by_category[MT_CAT_PARAMETERS], 4 * MiB);
    cr_expect_eq(r->by_category[MT_CAT_ACTIVATIONS], 2 * MiB);
    cr_expect_eq(r->by_category[MT_CAT_OPTIMIZER_STATE], 0, "freed before the failure");
    mt_analysis_free(a);
    mt_analysis_free(p);
}

/* mt_category_fit_compute: exact sizes first, then larger blocks within 2 MiB, copies. */
Test(categories, fit)
{
    const uint64_t params[] = {4 * MiB, 1 * MiB, 512};
    const uint64_t state[] = {4 * MiB, 4 * MiB + MiB, 1 * MiB, 512, 512, 100 * MiB};
    mt_category_fit f;
    cr_assert_eq(mt_category_fit_compute(params, 3, state, 6, 2, &f), 0);
    cr_expect_eq(f.paired, 9 * MiB + 1024);
    cr_expect_eq(f.n_paired, 5);
    cr_expect_eq(f.larger, MiB);
    cr_expect_eq(f.n_unpaired, 1);
    cr_expect_eq(f.unpaired, 100 * MiB);
    cr_expect_eq(f.params_left, 1 * MiB, "one copy of the 1 MiB parameter has no state");
    cr_expect_eq(f.n_params_left, 1);
    cr_expect_eq(f.paired + f.params_left, 2 * (5 * MiB + 512), "every parameter copy counted");
    cr_assert_eq(mt_category_fit_compute(params, 3, NULL, 0, 1, &f), 0);
    cr_expect_eq(f.paired + f.unpaired + f.params_left, 0);
}

/* Either block may be the larger: a fine-tuned ResNet-18's fc.weight (2 048 000 bytes) sat in a
 * whole 2 MiB block and its gradient in a block of its own size, beside a frozen 1.1 MiB
 * convolution. The nearest size wins, a parameter not larger on a tie; 2 MiB is the most either
 * way. */
Test(categories, fit_nearest_block_either_way)
{
    const uint64_t params[] = {2 * MiB, 1179648, 4096};
    const uint64_t grads[] = {2048000, 4096};
    mt_category_fit f;
    cr_assert_eq(mt_category_fit_compute(params, 3, grads, 2, 1, &f), 0);
    cr_expect_eq(f.n_paired, 2);
    cr_expect_eq(f.paired, 2048000 + 4096, "a pair counts the smaller block");
    cr_expect_eq(f.n_smaller, 1);
    cr_expect_eq(f.smaller, 2 * MiB - 2048000);
    cr_expect_eq(f.n_larger, 0, "not the convolution, 868 352 bytes away");
    cr_expect_eq(f.params_left, 1179648, "the frozen convolution is left");
    /* a tie: 1 MiB from each; the parameter not larger */
    const uint64_t two[] = {3 * MiB, 1 * MiB}, t2[] = {2 * MiB};
    cr_assert_eq(mt_category_fit_compute(two, 2, t2, 1, 1, &f), 0);
    cr_expect_eq(f.n_larger, 1);
    cr_expect_eq(f.params_left, 3 * MiB);
    /* past 2 MiB either way: no pair */
    const uint64_t far[] = {8 * MiB, 512}, t3[] = {5 * MiB};
    cr_assert_eq(mt_category_fit_compute(far, 2, t3, 1, 1, &f), 0);
    cr_expect_eq(f.n_unpaired, 1);
    cr_expect_eq(f.n_paired, 0);
}

/* Default mode (no --tensors): the report says what categories need. */
Test(categories, default_mode_says_what_it_needs)
{
    fx f;
    fx_open(&f, "segments.mtrace");
    stacks(&f);
    fx_module(&f, 2, "/opt/torch/lib/libc10_cuda.so", 0x700000, 0x710000);
    fx_symbol(&f, 0x700100, 0, "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(int)", "", 0);
    fx_node(&f, 60, 4, 0x700100, MT_FRAME_NATIVE);
    fx_ev_full(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A, 20 * MiB, 1, 60, 1, MT_EF_SEGMENT);
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    cr_expect(a->categories == NULL);
    char *text = fx_capture(a, fx_report_text_fn, NULL, ".txt");
    cr_expect(strstr(text, "by category      needs `memtrace record --tensors`"), "%s", text);
    free(text);
    mt_analysis_free(a);
}

/* ---- the GPU-recorded fixtures ----------------------------------------------------------------- */

/* A number from the .json beside a fixture ("key": N), or -1. */
/* tests/data/NAME.mtrace into path; the test is skipped when it is not there. */
static void fixture_path(const char *name, char *path, size_t len)
{
    snprintf(path, len, "%s/%s.mtrace", MT_TEST_DATA_DIR, name);
    struct stat st;
    if (stat(path, &st) != 0) cr_skip_test("%s is not there", path);
}

/* The analysis of tests/data/NAME.mtrace (skipped when it is not there). */
static mt_analysis *fixture_analysis(const char *name)
{
    char path[1024];
    fixture_path(name, path, sizeof path);
    return fx_analyze(path);
}

static double stat_of(const char *name, const char *key)
{
    char path[1024], buf[4096];
    snprintf(path, sizeof path, "%s/%s.json", MT_TEST_DATA_DIR, name);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char pat[128];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = strstr(buf, pat);
    return p ? strtod(p + strlen(pat), NULL) : -1;
}

static double rel_diff(double got, double want) { return fabs(got - want) / want; }

/* |got - want| within what pairing by size cannot tell apart: the bytes by which paired blocks
 * differ from their parameters', plus 512 a tensor (PyTorch counts numel * element_size) */
static int within_fit_slack(uint64_t got, double want, const mt_category_fit *f)
{
    double slack = (double)(f->larger + f->smaller + 512 * f->n_paired);
    return fabs((double)got - want) <= slack;
}

/* A GPU fixture with its .json: the analysis of tests/data/NAME.mtrace, its device 0 in *d, its
 * categories known and adding up to the run's max_memory_allocated(), and where the run said the
 * allocator's blocks of its parameters and buffers (param_block_bytes), the parameters row equal
 * to them to the byte (gpt2_pretrained_tensors: from_pretrained's weights were "inputs" before). */
static mt_analysis *gpu_fixture(const char *name, const mt_device_report **d)
{
    char path[1024];
    fixture_path(name, path, sizeof path);
    double max_alloc = stat_of(name, "max_allocated");
    cr_assert(max_alloc > 0, "%s: its .json", name);
    mt_analysis *a = fx_analyze(path);
    *d = fx_dev(a, 0);
    cr_assert((*d)->categories_known, "%s", name);
    uint64_t sum = 0;
    for (unsigned x = 0; x < MT_CAT_MAX; x++) sum += (*d)->by_category_at_peak[x];
    cr_expect_eq((double)sum, max_alloc, "%s: categories add up to max_memory_allocated", name);
    double blocks = stat_of(name, "param_block_bytes");
    uint64_t params = (*d)->by_category_at_peak[MT_CAT_PARAMETERS];
    if (blocks >= 0)
        cr_expect_eq((double)params, blocks, "%s: parameters %llu, the allocator's blocks %.0f", name,
                     (unsigned long long)params, blocks);
    return a;
}

/* PyTorch's numbers are numel * element_size; the trace's are the caching allocator's blocks (a
 * tensor's block is a multiple of 512 bytes, and is sometimes larger: the allocator hands out a
 * whole block rather than leave a small remainder). So: parameters and the gradients and state
 * paired with parameters within 1%; what the blocks add is named by the fit, exactly.
 * gpt2_ckpt_tensors runs transformers' gradient checkpointing (non-reentrant): its recomputed
 * blocks, on autograd's worker with Python frames, were activations and ended the backward pass
 * at the first one (gradients after it: 30% short); gpt2_ckpt_reentrant_tensors the reentrant
 * variant, whose recomputation runs a backward pass of its own inside the backward pass. */
Test(categories, gpu_fixtures_match_pytorch)
{
    static const char *const names[] = {"gpt2_tensors",      "gpt2_amp_tensors",
                                        "resnet18_tensors",  "resnet18_compile_tensors",
                                        "gpt2_ckpt_tensors", "gpt2_ckpt_reentrant_tensors",
                                        "bert_tensors", "gpt2_pretrained_tensors",
                                        "gpt2_loss_outside_tensors"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        double params = stat_of(names[i], "param_bytes"), state = stat_of(names[i], "optimizer_state_bytes");
        cr_assert(params > 0 && state > 0, "%s: its .json", names[i]);
        const mt_device_report *d;
        mt_analysis *a = gpu_fixture(names[i], &d); /* and the parameters = the blocks, if given */
        uint64_t k = 0;
        cr_expect_str_eq(mt_categorizer_optimizer(a->categories, &k), "Adam or AdamW", "%s", names[i]);
        const uint64_t *c = d->by_category_at_peak;
        cr_expect_lt(rel_diff((double)c[MT_CAT_PARAMETERS], params), 0.01, "%s: parameters %llu vs %.0f",
                     names[i], (unsigned long long)c[MT_CAT_PARAMETERS], params);
        const mt_category_fit *fs = &d->fit_at_peak[1];
        cr_expect_lt(rel_diff((double)fs->paired, state), 0.01, "%s: state paired %llu vs %.0f",
                     names[i], (unsigned long long)fs->paired, state);
        cr_expect_eq(fs->paired + fs->larger + fs->unpaired, c[MT_CAT_OPTIMIZER_STATE],
                     "%s: the state is paired + larger blocks + unpaired", names[i]);
        cr_expect_eq(fs->n_unpaired, 0, "%s: every state tensor mirrors a parameter", names[i]);
        cr_expect_lt((double)fs->larger / state, 0.03, "%s: block rounding stays small", names[i]);
        /* the peak is in the forward or backward pass: no state is made there, no optimizer
         * temporary lives, and there are never "other" tensors in these plain programs */
        cr_expect_eq(c[MT_CAT_OPTIMIZER_TEMP], 0, "%s", names[i]);
        cr_expect_eq(c[MT_CAT_OTHER], 0, "%s: every tensor placed", names[i]);
        /* after the backward pass: the gradients mirror every parameter (not buffers) */
        cr_assert(d->after_backward_known, "%s", names[i]);
        const mt_category_fit *fg = &d->fit_after_backward[0];
        cr_expect_lt(rel_diff((double)fg->paired, params), 0.01, "%s: gradients paired %llu vs %.0f",
                     names[i], (unsigned long long)fg->paired, params);
        cr_expect_eq(fg->n_unpaired, 0, "%s: no gradient the size of no parameter", names[i]);
        cr_expect_eq(d->by_category_after_backward[MT_CAT_BACKWARD_TEMP] > 4096, 0,
                     "%s: nothing of the backward pass but its seeds outlives it", names[i]);
        mt_analysis_free(a);
    }
}

/* A detection model (torchvision's Faster R-CNN, MobileNetV3-Large 320 FPN, trained with AdamW):
 * lists of images and boxes, a dict of losses, NMS and RoIAlign, tensors whose sizes change each
 * step. Its parameters row is the caching allocator's blocks of its 192 parameters and 138
 * buffers (param_block_bytes, from torch.cuda.memory_snapshot() in the traced run) to the byte,
 * 1.58% over PyTorch's numel * element_size of the parameters; gradients and state are
 * PyTorch's within the pairing's slack, every one paired; full training keeps W (the buffers
 * without a gradient weigh less than the fit's larger block). "other": the targets' boxes, made
 * with torch.cat outside any module, and the losses' sum. */
Test(categories, gpu_detection_model)
{
    double blocks = stat_of("detection_tensors", "param_block_bytes");
    double grads = stat_of("detection_tensors", "grad_bytes");
    double state = stat_of("detection_tensors", "optimizer_state_bytes");
    cr_assert(blocks > 0 && grads > 0 && state > 0, "its .json");
    const mt_device_report *d;
    mt_analysis *a = gpu_fixture("detection_tensors", &d); /* parameters = blocks, to the byte */
    uint64_t k = 0;
    cr_expect_str_eq(mt_categorizer_optimizer(a->categories, &k), "Adam or AdamW");
    const uint64_t *c = d->by_category_at_peak;
    const mt_category_fit *fs = &d->fit_at_peak[1], *fg = &d->fit_after_backward[0];
    cr_expect(within_fit_slack(fs->paired, state, fs), "state paired %llu vs %.0f",
              (unsigned long long)fs->paired, state);
    cr_expect_eq(fs->n_unpaired, 0, "every state tensor mirrors a parameter");
    cr_assert(d->after_backward_known);
    cr_expect(within_fit_slack(fg->paired, grads, fg), "gradients paired %llu vs %.0f",
              (unsigned long long)fg->paired, grads);
    cr_expect_eq(fg->n_unpaired, 0, "no gradient the size of no parameter");
    cr_expect_leq(c[MT_CAT_OTHER], 2560, "other: %llu", (unsigned long long)c[MT_CAT_OTHER]);
    mt_cat_table t;
    mt_category_table(a, d, &t);
    cr_expect_eq(t.w_trained, t.w, "full training: W_t is W");
    mt_analysis_free(a);
}

/* A cuDNN LSTM language model (H200, train.py --model lstm): flatten_parameters() keeps the
 * LSTM's 8 weights as views of one 16 MiB block, and Adam's state holds a tensor per view. By size
 * the 16 state tensors mirror no parameter and the flat block (x2 copies) has no state; their
 * bytes agree within the blocks' rounding, and the state line says they go together. The
 * parameters row is the allocator's blocks to the byte, the state PyTorch's within the slack. */
Test(categories, gpu_rnn_flat_weights)
{
    double blocks = stat_of("lstm_tensors", "param_block_bytes");
    double state = stat_of("lstm_tensors", "optimizer_state_bytes");
    double grads = stat_of("lstm_tensors", "grad_bytes");
    cr_assert(blocks > 0 && state > 0 && grads > 0, "its .json");
    const mt_device_report *d;
    mt_analysis *a = gpu_fixture("lstm_tensors", &d); /* parameters = blocks, to the byte */
    const mt_category_fit *fs = &d->fit_at_peak[1];
    cr_expect_eq(fs->n_unpaired, 16, "a state tensor per view: %llu", (unsigned long long)fs->n_unpaired);
    cr_expect_eq(fs->n_params_left, 2, "the flat block, x2 copies: %llu",
                 (unsigned long long)fs->n_params_left);
    cr_expect(within_fit_slack(fs->paired + fs->unpaired, state, fs), "state %llu + %llu vs %.0f",
              (unsigned long long)fs->paired, (unsigned long long)fs->unpaired, state);
    const mt_category_fit *fg = &d->fit_after_backward[0];
    cr_expect(within_fit_slack(fg->paired, grads, fg), "gradients paired %llu vs %.0f",
              (unsigned long long)fg->paired, grads);
    mt_cat_table t;
    mt_category_table(a, d, &t);
    const mt_cat_row *r = table_row(&t, MT_CAT_OPTIMIZER_STATE);
    cr_expect(strstr(r->why, "16 tensors the size of no parameter, and") &&
                  strstr(r->why, "2 parameter copies mirrored by none") &&
                  strstr(r->why, "views of one block") && !strstr(r->why, "buffers have none"),
              "the state's line: %s", r->why);
    mt_analysis_free(a);
}

/* A resumed run (H200, train.py --resume: one step, a checkpoint of the model and the optimizer
 * saved, loaded back with map_location="cuda" into both, the loaded dict kept referenced). Its
 * tensors, put on the GPU by torch.load, are a category of their own, equal to the allocator's
 * blocks under the dict's tensors to the byte (they read "other" before). The optimizer made no
 * state: load_state_dict adopted the loaded state without a copy, and the state's line says the
 * checkpoint likely holds it. Nothing is left in "other". */
Test(categories, gpu_resumed_from_a_checkpoint)
{
    double held = stat_of("resnet18_resume_tensors", "checkpoint_block_bytes");
    cr_assert(held > 0, "its .json");
    const mt_device_report *d;
    mt_analysis *a = gpu_fixture("resnet18_resume_tensors", &d);
    const uint64_t *c = d->by_category_at_peak;
    cr_expect_eq((double)c[MT_CAT_CHECKPOINT], held, "checkpoint %llu, the dict's blocks %.0f",
                 (unsigned long long)c[MT_CAT_CHECKPOINT], held);
    cr_expect_eq(c[MT_CAT_OTHER], 0);
    cr_expect_eq(c[MT_CAT_OPTIMIZER_STATE], 0, "no state made by the optimizer");
    cr_expect_str_eq(mt_category_name(a->categories, MT_CAT_CHECKPOINT), "checkpoint");
    mt_cat_table t;
    mt_category_table(a, d, &t);
    const mt_cat_row *state = table_row(&t, MT_CAT_OPTIMIZER_STATE);
    cr_expect(strstr(state->why, "checkpoint loaded onto the GPU holds 136.60 MiB"), "%s", state->why);
    const mt_cat_row *ck = table_row(&t, MT_CAT_CHECKPOINT);
    cr_assert_not_null(ck, "a checkpoint line");
    cr_expect(!ck->has_textbook && strstr(ck->why, "map_location"), "%s", ck->why);
    mt_analysis_free(a);
}

/* The bytes at d's peak of the stacks with a frame whose short name contains needle, all of which
 * must be of category cat. */
static uint64_t peak_bytes_under(mt_analysis *a, const mt_device_report *d, const char *needle,
                                 unsigned cat)
{
    uint64_t bytes = 0;
    for (size_t k = 0; k < d->peak_stacks.n; k++) {
        if (!fx_stack_has(a->frames, d->peak_stacks.v[k].stack, needle)) continue;
        cr_expect_eq(d->peak_stacks.v[k].category, cat, "under %s: category %u", needle,
                     d->peak_stacks.v[k].category);
        bytes += d->peak_stacks.v[k].bytes;
    }
    return bytes;
}

/* The same resumed run with the model's weights in a .safetensors file (H200, train.py --resume
 * --resume-format safetensors): load_file(device="cuda") makes them on the GPU from safetensors'
 * Rust reader, under the Python frame load_file (safetensors/torch.py). They are the checkpoint's
 * with the optimizer's state torch.load put there: the line is the allocator's blocks under the
 * loaded dicts to the byte (94 602 240 B, the state alone, before: the weights read "inputs"). */
Test(categories, gpu_resumed_from_safetensors)
{
    const char *name = "resnet18_resume_safetensors_tensors";
    double held = stat_of(name, "checkpoint_block_bytes");
    cr_assert(held > 0, "its .json");
    const mt_device_report *d;
    mt_analysis *a = gpu_fixture(name, &d);
    const uint64_t *c = d->by_category_at_peak;
    cr_expect_eq((double)c[MT_CAT_CHECKPOINT], held, "checkpoint %llu, the dicts' blocks %.0f",
                 (unsigned long long)c[MT_CAT_CHECKPOINT], held);
    cr_expect_eq(c[MT_CAT_OTHER], 0);
    cr_expect_eq(c[MT_CAT_OPTIMIZER_STATE], 0, "no state made by the optimizer");
    /* the weights: at least the parameters' blocks, every one under load_file */
    uint64_t loaded = peak_bytes_under(a, d, "load_file (safetensors/torch.py", MT_CAT_CHECKPOINT);
    cr_expect_geq((double)loaded, stat_of(name, "param_bytes"), "load_file's tensors: %llu",
                  (unsigned long long)loaded);
    mt_analysis_free(a);
}

/* The loss computed by the training loop, outside any module (H200, train.py --model gpt2
 * --loss-outside: F.cross_entropy(logits.view(-1, vocab), ids.view(-1))). Its log-softmax, 8 x
 * 256 x 50 257 floats kept for the backward pass, is the forward's: an activation. It was
 * "other" before, 17% of the peak. */
Test(categories, gpu_loss_outside_the_model)
{
    const mt_device_report *d;
    mt_analysis *a = gpu_fixture("gpt2_loss_outside_tensors", &d);
    uint64_t loss = peak_bytes_under(a, d, "cross_entropy (torch/nn/functional.py", MT_CAT_ACTIVATIONS);
    cr_expect_geq(loss, 8ull * 256 * 50257 * 4, "the log-softmax at the peak: %llu",
                  (unsigned long long)loss);
    cr_expect_eq(d->by_category_at_peak[MT_CAT_OTHER], 0);
    mt_analysis_free(a);
}

/* Knowledge distillation (H200, train.py --distill): a ResNet-18 student beside a frozen ResNet-50
 * teacher, in eval mode under no_grad. W is both models' blocks, to the byte; W_t, the parameters
 * that got a gradient, is the student's (PyTorch's gradients within the pairing's slack), and the
 * state's textbook is 2 W_t. "other": the two losses' sum, made in the loop (512 B). */
Test(categories, gpu_distilled_from_a_frozen_teacher)
{
    const char *name = "resnet18_distill_tensors";
    double grads = stat_of(name, "grad_bytes"), state = stat_of(name, "optimizer_state_bytes");
    cr_assert(grads > 0 && state > 0, "its .json");
    const mt_device_report *d;
    mt_analysis *a = gpu_fixture(name, &d); /* W = both models' blocks, to the byte */
    mt_cat_table t;
    mt_category_table(a, d, &t);
    cr_assert(d->after_backward_known);
    const mt_category_fit *fg = &d->fit_after_backward[0], *fs = &d->fit_at_peak[1];
    cr_expect(t.w_trained < t.w / 2, "W_t %llu, W %llu: the teacher is most of W",
              (unsigned long long)t.w_trained, (unsigned long long)t.w);
    cr_expect(within_fit_slack(t.w_trained, grads, fg), "W_t %llu vs the student's %.0f",
              (unsigned long long)t.w_trained, grads);
    cr_expect(within_fit_slack(fs->paired, state, fs), "state paired %llu vs %.0f",
              (unsigned long long)fs->paired, state);
    cr_expect_eq(table_row(&t, MT_CAT_OPTIMIZER_STATE)->textbook, 2 * t.w_trained);
    cr_expect_leq(d->by_category_at_peak[MT_CAT_OTHER], 512);
    mt_analysis_free(a);
}

/* A recommendation model (H200, train.py --model recsys): an EmbeddingBag of 1 000 000 x 64 with
 * sparse=True (SparseAdam) beside a dense MLP (AdamW). The table's gradient is sparse, the rows a
 * batch touched: after the backward pass it is the one gradient paired with no parameter, PyTorch's
 * values (and at most its indices, which may be the batch's own ids), and the gradients' line says
 * so instead of pointing at DDP's and FSDP's buckets, which this run has none of. An LSTM's dense
 * embedding makes no such stack. */
Test(categories, gpu_sparse_embedding_gradient)
{
    const char *name = "recsys_tensors";
    double values = stat_of(name, "sparse_grad_bytes"), index = stat_of(name, "sparse_grad_index_bytes");
    double dense = stat_of(name, "grad_bytes");
    cr_assert(values > 0 && index > 0 && dense > 0, "its .json");
    const mt_device_report *d;
    mt_analysis *a = gpu_fixture(name, &d); /* parameters = blocks, to the byte */
    cr_expect(mt_categorizer_saw_sparse_grad(a->categories));
    uint64_t k = 0;
    const char *opt = mt_categorizer_optimizer(a->categories, &k);
    cr_expect_str_eq(opt ? opt : "", "SparseAdam and Adam or AdamW", "both optimizers named");
    cr_expect_eq(k, 2);
    cr_assert(d->after_backward_known);
    const mt_category_fit *fg = &d->fit_after_backward[0];
    cr_expect_eq(fg->n_unpaired, 1, "the sparse gradient alone: %llu", (unsigned long long)fg->n_unpaired);
    cr_expect((double)fg->unpaired >= values && (double)fg->unpaired <= values + index + 512.0 * (double)fg->n_unpaired,
              "unpaired %llu vs values %.0f, indices %.0f", (unsigned long long)fg->unpaired, values, index);
    cr_expect(within_fit_slack(fg->paired, dense, fg), "the MLP's gradients %llu vs %.0f",
              (unsigned long long)fg->paired, dense);
    mt_cat_table t;
    mt_category_table(a, d, &t);
    const mt_cat_row *g = table_row(&t, MT_CAT_GRADIENTS);
    cr_expect(strstr(g->why, "sparse embedding's gradient") && !strstr(g->why, "DDP"), "%s", g->why);
    /* the table, the one parameter without a gradient of its size, in the singular */
    cr_expect(strstr(g->why, ": 1 parameter or buffer without a gradient at the peak"), "%s", g->why);
    mt_analysis_free(a);
    a = gpu_fixture("lstm_tensors", &d);
    cr_expect(!mt_categorizer_saw_sparse_grad(a->categories), "a dense embedding");
    mt_analysis_free(a);
}

/* Activations offloaded to pinned host memory (H200, train.py --offload: the forward under
 * torch.autograd.graph.save_on_cpu(pin_memory=True)). The backward pass copies each saved tensor
 * back to the GPU from its unpack hook: those copies are the backward pass's. They read "inputs"
 * before (Python, a copy), and each ended the backward pass, so that its live temporaries became
 * "gradients": 240.56 MiB of them at the peak, 196 MiB the size of no parameter. Now the
 * gradients after the pass pair with the parameters, every one, and "inputs" is the batch. */
Test(categories, gpu_offloaded_activations)
{
    const char *name = "resnet18_offload_tensors";
    double grads = stat_of(name, "grad_bytes");
    cr_assert(grads > 0, "its .json");
    const mt_device_report *d;
    mt_analysis *a = gpu_fixture(name, &d);
    uint64_t back = peak_bytes_under(a, d, "unpack_from_cpu (torch/autograd/graph.py",
                                     MT_CAT_BACKWARD_TEMP);
    cr_expect_gt(back, 0, "the copies back at the peak");
    cr_assert(d->after_backward_known);
    const mt_category_fit *fg = &d->fit_after_backward[0];
    cr_expect_eq(fg->n_unpaired, 0, "no gradient the size of no parameter: %llu",
                 (unsigned long long)fg->n_unpaired);
    cr_expect(within_fit_slack(fg->paired, grads, fg), "gradients paired %llu vs %.0f",
              (unsigned long long)fg->paired, grads);
    cr_expect_eq(d->by_category_at_peak[MT_CAT_INPUTS], 32ull * 3 * 224 * 224 * 4 + 512,
                 "inputs: the batch and its labels, %llu",
                 (unsigned long long)d->by_category_at_peak[MT_CAT_INPUTS]);
    cr_expect_eq(d->by_category_at_peak[MT_CAT_OTHER], 0);
    mt_analysis_free(a);
}

/* PyTorch's other optimizers (H200, train.py --optim nadam, asgd): each named, its state's
 * textbook k W (NAdam two moments, ASGD one average) and its state PyTorch's within the pairing's
 * slack. ASGD also keeps eta and mu on each parameter's device, 512-byte scalars the state's line
 * names as ASGD's (not a fused Adam's step counts). */
Test(categories, gpu_other_optimizers)
{
    static const struct { const char *fixture, *name; uint64_t k; } runs[] = {
        {"resnet18_nadam_tensors", "NAdam", 2}, {"resnet18_asgd_tensors", "ASGD", 1}};
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        double state = stat_of(runs[i].fixture, "optimizer_state_bytes");
        cr_assert(state > 0, "%s: its .json", runs[i].fixture);
        const mt_device_report *d;
        mt_analysis *a = gpu_fixture(runs[i].fixture, &d);
        uint64_t k = 0;
        const char *opt = mt_categorizer_optimizer(a->categories, &k);
        cr_expect_str_eq(opt ? opt : "", runs[i].name);
        cr_expect_eq(k, runs[i].k, "%s: k %llu", runs[i].name, (unsigned long long)k);
        const mt_category_fit *fs = &d->fit_at_peak[1];
        cr_expect(within_fit_slack(fs->paired, state, fs), "%s: state paired %llu vs %.0f",
                  runs[i].name, (unsigned long long)fs->paired, state);
        mt_cat_table t;
        mt_category_table(a, d, &t);
        const mt_cat_row *r = table_row(&t, MT_CAT_OPTIMIZER_STATE);
        cr_expect_eq(r->textbook, runs[i].k * t.w_trained, "%s", runs[i].name);
        if (runs[i].k == 1)
            cr_expect(strstr(r->why, "ASGD's eta and mu"), "%s", r->why);
        mt_analysis_free(a);
    }
}

/* One FSDP2 step on a rank, by construction (MiB): its shard 2 (FSDPParam._init_sharded_param);
 * the forward's all-gather 4 (FSDPParamGroup.unshard -> foreach_all_gather) and an activation 3;
 * the backward pass on autograd's thread: the whole gradient 4, the all-gather again 4 (from the
 * pre-backward hook: it must not end the pass), the reduce-scatter's input 4 (foreach_reduce:
 * the whole gradients, copied) and its output 2 (this rank's gradient) = THE PEAK 20; then the
 * whole gradient, the input, the activation and the all-gather freed; the main thread's free of
 * the batch ends the pass. */
Test(categories, fsdp_step_by_construction)
{
    fx f;
    fx_open(&f, "categories_fsdp.mtrace");
    fx_process(&f, "python3", "python3 train.py");
    stacks(&f);
    const char *fsdp = "/venv/lib/python3.12/site-packages/torch/distributed/fsdp/_fully_shard/";
    char path[3][256];
    snprintf(path[0], sizeof path[0], "%s_fsdp_param.py", fsdp);
    snprintf(path[1], sizeof path[1], "%s_fsdp_param_group.py", fsdp);
    snprintf(path[2], sizeof path[2], "%s_fsdp_collectives.py", fsdp);
    pycode(&f, 20, path[0], "FSDPParam._init_sharded_param");
    pycode(&f, 21, path[1], "FSDPParamGroup.unshard");
    pycode(&f, 22, path[2], "foreach_all_gather");
    pycode(&f, 23, path[1], "FSDPParamGroup.pre_backward");
    pycode(&f, 24, path[1], "FSDPParamGroup.post_backward");
    pycode(&f, 25, path[2], "foreach_reduce");
    fx_node(&f, 60, 1, PY(20, 390), MT_FRAME_PYTHON);
    fx_node(&f, 61, 3, PY(21, 339), MT_FRAME_PYTHON);
    fx_node(&f, 62, 61, PY(22, 263), MT_FRAME_PYTHON);
    fx_node(&f, 63, 10, PY(23, 494), MT_FRAME_PYTHON);
    fx_node(&f, 64, 63, PY(21, 339), MT_FRAME_PYTHON);
    fx_node(&f, 65, 64, PY(22, 263), MT_FRAME_PYTHON);
    fx_node(&f, 66, 10, PY(24, 520), MT_FRAME_PYTHON);
    fx_node(&f, 67, 66, PY(25, 500), MT_FRAME_PYTHON);
    uint64_t t = 1;
    tensor(&f, MT_OP_ALLOC, A + 0x000, 2 * MiB, t++, 60, MAIN_TID);     /* the shard */
    tensor(&f, MT_OP_ALLOC, A + 0x100, 1 * MiB, t++, 41, MAIN_TID);     /* the batch */
    tensor(&f, MT_OP_ALLOC, A + 0x200, 4 * MiB, t++, 62, MAIN_TID);     /* all-gather */
    tensor(&f, MT_OP_ALLOC, A + 0x300, 3 * MiB, t++, 4, MAIN_TID);      /* activation */
    tensor(&f, MT_OP_FREE, A + 0x200, 0, t++, 0, MAIN_TID);             /* resharded */
    tensor(&f, MT_OP_ALLOC, A + 0x400, 4 * MiB, t++, 10, AUTOGRAD_TID); /* whole gradient */
    tensor(&f, MT_OP_ALLOC, A + 0x500, 4 * MiB, t++, 65, AUTOGRAD_TID); /* all-gather again */
    tensor(&f, MT_OP_ALLOC, A + 0x600, 4 * MiB, t++, 67, AUTOGRAD_TID); /* RS input */
    tensor(&f, MT_OP_ALLOC, A + 0x700, 2 * MiB, t++, 67, AUTOGRAD_TID); /* RS output: peak */
    tensor(&f, MT_OP_FREE, A + 0x400, 0, t++, 0, AUTOGRAD_TID);
    tensor(&f, MT_OP_FREE, A + 0x600, 0, t++, 0, AUTOGRAD_TID);
    tensor(&f, MT_OP_FREE, A + 0x300, 0, t++, 0, AUTOGRAD_TID);
    tensor(&f, MT_OP_FREE, A + 0x500, 0, t++, 0, AUTOGRAD_TID);
    tensor(&f, MT_OP_FREE, A + 0x100, 0, t++, 0, MAIN_TID);             /* ends the pass */
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    const mt_device_report *d = fx_dev(a, 0);
    const uint64_t *c = d->by_category_at_peak;
    cr_expect_eq(d->by_kind_at_peak[MT_KIND_TENSOR], 20 * MiB);
    cr_expect_eq(c[MT_CAT_PARAMETERS], 2 * MiB, "W: the shard");
    cr_expect_eq(c[MT_CAT_UNSHARDED], 4 * MiB, "the backward's all-gather");
    cr_expect_eq(c[MT_CAT_ACTIVATIONS], 3 * MiB);
    cr_expect_eq(c[MT_CAT_BACKWARD_TEMP], 8 * MiB, "the whole gradient and the RS input");
    cr_expect_eq(c[MT_CAT_GRADIENTS], 2 * MiB, "the RS output, which outlives the pass");
    cr_assert(d->after_backward_known);
    cr_expect_eq(d->by_category_after_backward[MT_CAT_GRADIENTS], 2 * MiB);
    cr_expect_eq(mt_categorizer_saw_parallel(a->categories), MT_SAW_FSDP);
    mt_cat_table tab;
    cr_assert_eq(mt_category_table(a, d, &tab), 0);
    cr_expect_eq(tab.w, 2 * MiB);
    mt_analysis_free(a);
}

/* A rank of FSDP2 and of FSDP1 (2 x H200, samples/ddp.py --fsdp, --fsdp1: the GPT-2-like model, each
 * block a unit of its own, AdamW). W is this rank's shards (the allocator's blocks of the
 * parameters' local tensors, to the byte); what the all-gathers make is "unsharded parameters".
 * Before, both were parameters: W read 185.83 MiB (FSDP2) and 184.74 MiB (FSDP1) against 75.14
 * and 74.05 MiB of shards, FSDP1's state textbook 369.48 MiB against 146.76 measured; the
 * all-gathers of the backward pass (a forward phase's category) ended it at its first one, and the
 * gradients "after" it were the embedding's whole gradient among activations (102.16 MiB against
 * PyTorch's sharded 73.4). FSDP2's gradients are one flat tensor per unit, and its line says so;
 * FSDP1's flat parameters get gradients of their own size. */
Test(categories, gpu_fsdp_shards_are_w)
{
    static const struct { const char *fixture, *gather; int flat_grads; } runs[] = {
        {"fsdp2_rank0_tensors", "all_gather", 1}, {"fsdp1_rank0_tensors", "unshard", 0}};
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        const char *name = runs[i].fixture;
        double grads = stat_of(name, "grad_bytes"), blocks = stat_of(name, "param_block_bytes");
        double state = stat_of(name, "optimizer_state_bytes");
        cr_assert(grads > 0 && blocks > 0 && state > 0, "%s: its .json", name);
        const mt_device_report *d;
        mt_analysis *a = gpu_fixture(name, &d); /* parameters = the shards' blocks, to the byte */
        cr_expect_eq(mt_categorizer_saw_parallel(a->categories), MT_SAW_FSDP);
        uint64_t gathered = peak_bytes_under(a, d, runs[i].gather, MT_CAT_UNSHARDED);
        cr_expect_gt(gathered, 100 * MiB, "%s: at least the tied embedding, whole", name);
        cr_expect_eq(d->by_category_at_peak[MT_CAT_UNSHARDED], gathered, "%s: the all-gathers' alone", name);
        /* after the backward pass: this rank's gradients, padded as its shards are */
        cr_assert(d->after_backward_known);
        uint64_t g = d->by_category_after_backward[MT_CAT_GRADIENTS];
        cr_expect((double)g >= grads && (double)g <= blocks, "%s: gradients %llu, PyTorch %.0f, shards %.0f",
                  name, (unsigned long long)g, grads, blocks);
        cr_expect_eq(d->by_category_after_backward[MT_CAT_BACKWARD_TEMP], 512, "%s: the seed alone: %llu",
                     name, (unsigned long long)d->by_category_after_backward[MT_CAT_BACKWARD_TEMP]);
        const mt_category_fit *fs = &d->fit_at_peak[1];
        cr_expect(within_fit_slack(fs->paired + fs->larger - fs->smaller, state, fs),
                  "%s: state paired %llu vs %.0f", name, (unsigned long long)fs->paired, state);
        mt_cat_table t;
        mt_category_table(a, d, &t);
        cr_expect_eq(t.w, (uint64_t)blocks);
        cr_expect(strstr(table_row(&t, MT_CAT_PARAMETERS)->why, "this rank's shards"), "%s",
                  table_row(&t, MT_CAT_PARAMETERS)->why);
        const char *why = table_row(&t, MT_CAT_GRADIENTS)->why;
        if (runs[i].flat_grads)
            cr_expect(strstr(why, "5 tensors: FSDP's sharded gradients") && !strstr(why, "DDP"), "%s", why);
        else
            cr_expect_eq(g, t.w, "%s: a gradient per flat parameter, its size", name);
        mt_analysis_free(a);
    }
}

/* FSDP2 with reshard_after_forward=1 taken as PyTorch takes an int below the shard group's size
 * (ddp.py --fsdp --post-forward, 2 x H200): each block keeps a copy of its gathered weights from
 * its forward to its backward pass (FSDPParam.to_sharded_post_forward). Those copies are unsharded
 * parameters; before, _fsdp_param.py made them parameters, and W read 133 427 200 B where the
 * rank's shards' blocks are 78 794 752 B. */
Test(categories, gpu_fsdp_post_forward_copies_are_unsharded)
{
    const char *name = "fsdp2_post_forward_rank0_tensors";
    double blocks = stat_of(name, "param_block_bytes"), kept = stat_of(name, "post_forward_bytes");
    cr_assert(blocks > 0 && kept > 0, "its .json");
    const mt_device_report *d;
    mt_analysis *a = gpu_fixture(name, &d);
    uint64_t copies = peak_bytes_under(a, d, "sharded_post_forward", MT_CAT_UNSHARDED);
    cr_expect(copies > 50 * MiB && (double)copies <= kept, "copies at the peak %llu, kept at most %.0f",
              (unsigned long long)copies, kept);
    cr_expect_geq(d->by_category_at_peak[MT_CAT_UNSHARDED], copies);
    cr_expect_eq((double)d->by_category_at_peak[MT_CAT_PARAMETERS], blocks);
    mt_cat_table t;
    mt_category_table(a, d, &t);
    cr_expect_eq(t.w, (uint64_t)blocks);
    cr_expect(strstr(table_row(&t, MT_CAT_UNSHARDED)->why, "reshard_after_forward=N"), "%s",
              table_row(&t, MT_CAT_UNSHARDED)->why);
    mt_analysis_free(a);
}

/* The sum of a list of numbers in a string value of a fixture's .json ("key": "1, 2, 3"), or -1. */
static double stat_list_sum(const char *name, const char *key)
{
    char path[1024], buf[4096], pat[128];
    snprintf(path, sizeof path, "%s/%s.json", MT_TEST_DATA_DIR, name);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    snprintf(pat, sizeof pat, "\"%s\": \"", key);
    const char *p = strstr(buf, pat);
    if (!p) return -1;
    double sum = 0;
    for (p += strlen(pat); *p && *p != '"';) {
        char *end;
        sum += strtod(p, &end);
        p = end == p ? p + 1 : end;
    }
    return sum;
}

/* A rank of DDP (2 x H200, samples/ddp.py). The reducer makes its buckets when DDP is built and
 * again in the first forward passes (rebuilt in the order gradients came): they are gradients, but
 * say no phase. Before, each began a "backward pass" that the forward's first activation ended,
 * and "after the backward pass" was that moment: 112.04 MiB, the rebuilt buckets alone. Now it is
 * the real one: every parameter's .grad, and the buckets as DDP's own logging sizes them. */
Test(categories, gpu_ddp_buckets_beside_the_gradients)
{
    const char *name = "ddp_buckets_rank0_tensors";
    double grads = stat_of(name, "grad_bytes"), buckets = stat_list_sum(name, "rebuilt_bucket_sizes");
    cr_assert(grads > 0 && buckets > 0, "its .json");
    const mt_device_report *d;
    mt_analysis *a = gpu_fixture(name, &d);
    cr_expect_eq(mt_categorizer_saw_parallel(a->categories), MT_SAW_DDP);
    cr_assert(d->after_backward_known);
    const mt_category_fit *fg = &d->fit_after_backward[0];
    cr_expect(within_fit_slack(fg->paired, grads, fg), "the .grad tensors %llu vs %.0f",
              (unsigned long long)fg->paired, grads);
    cr_expect_eq(fg->n_unpaired, 3, "the 3 rebuilt buckets: %llu", (unsigned long long)fg->n_unpaired);
    cr_expect(fabs((double)fg->unpaired - buckets) <= 512.0 * (double)fg->n_unpaired,
              "buckets %llu vs DDP's %.0f", (unsigned long long)fg->unpaired, buckets);
    mt_cat_table t;
    mt_category_table(a, d, &t);
    const char *why = table_row(&t, MT_CAT_GRADIENTS)->why;
    cr_expect(strstr(why, "DDP's gradient buckets") && strstr(why, "gradient_as_bucket_view"), "%s", why);
    mt_analysis_free(a);
}

/* torch.nn.DataParallel over 2 GPUs (2 x H200, train.py --model resnet18 --data-parallel). Autograd
 * runs each GPU's part of the backward pass on a thread of its own; with one backward thread
 * remembered, each switch between them "ended" the pass and promoted the other's temporaries to
 * gradients (cuda:1, which holds no parameter, read 39.51 MiB of gradients; cuda:0 61.37 MiB
 * against W's 44.69). The replicas of the weights on cuda:1 read "activations". */
Test(categories, gpu_data_parallel)
{
    const char *name = "resnet18_dp_tensors";
    double grads = stat_of(name, "grad_bytes");
    double peak1 = stat_of(name, "1\": {\"max_allocated"); /* PyTorch's, on cuda:1 */
    cr_assert(grads > 0 && peak1 > 0, "its .json");
    const mt_device_report *d;
    mt_analysis *a = gpu_fixture(name, &d);
    cr_expect_eq(mt_categorizer_saw_parallel(a->categories), MT_SAW_DP);
    cr_assert(d->after_backward_known);
    const mt_category_fit *fg = &d->fit_after_backward[0];
    double slack = (double)(fg->larger + fg->smaller + 512 * (fg->n_paired + fg->n_unpaired));
    cr_expect(fabs((double)(fg->paired + fg->unpaired) - grads) <= slack,
              "gradients %llu + %llu vs PyTorch %.0f", (unsigned long long)fg->paired,
              (unsigned long long)fg->unpaired, grads);
    mt_cat_table t;
    mt_category_table(a, d, &t);
    cr_expect(strstr(table_row(&t, MT_CAT_GRADIENTS)->why, "DataParallel's gradients"), "%s",
              table_row(&t, MT_CAT_GRADIENTS)->why);
    const mt_device_report *d1 = fx_dev(a, 1);
    uint64_t sum = 0;
    for (unsigned x = 0; x < MT_CAT_MAX; x++) sum += d1->by_category_at_peak[x];
    cr_expect_eq((double)sum, peak1, "cuda:1's categories add up to its max_memory_allocated");
    cr_expect_eq(d1->by_category_at_peak[MT_CAT_PARAMETERS], 0);
    cr_expect_eq(d1->by_category_at_peak[MT_CAT_GRADIENTS], 0);
    cr_expect_eq(d1->by_category_after_backward[MT_CAT_GRADIENTS], 0);
    uint64_t replicas = peak_bytes_under(a, d1, "torch/nn/parallel/replicate.py", MT_CAT_REPLICAS);
    cr_expect_gt(replicas, 40 * MiB, "ResNet-18's weights, broadcast: %llu", (unsigned long long)replicas);
    cr_expect_eq(d1->by_category_at_peak[MT_CAT_REPLICAS], replicas);
    mt_analysis_free(a);
}

/* torch.compile(mode="max-autotune-no-cudagraphs") compiling a ResNet-18 (H200, train.py --compile
 * --compile-mode ...; killed by a timeout at 420 s, still choosing convolution kernels: no END
 * record, no .json). Its peak is inductor's benchmark of candidate kernels for one convolution:
 * their random inputs (rand_strided) and outputs, and the benchmarker's flush buffer, 390.85 MiB
 * under select_algorithm.py, which read "activations" (the compile runs inside the first forward).
 * A compiled run's own kernels stay activations: resnet18_compile_tensors is held to PyTorch's
 * numbers in gpu_fixtures_match_pytorch, and none of its tensors at the peak is compilation. */
Test(categories, gpu_max_autotune_is_compilation)
{
    mt_analysis *a = fixture_analysis("resnet18_max_autotune_killed");
    const mt_device_report *d = fx_dev(a, 0);
    cr_assert(d->categories_known);
    uint64_t choosing = 0; /* the tensors under it (cuDNN's handles there are not) */
    for (size_t k = 0; k < d->peak_stacks.n; k++) {
        const mt_stack_stat *st = &d->peak_stacks.v[k];
        if (st->category == MT_CAT_NONE ||
            !fx_stack_has(a->frames, st->stack, "torch/_inductor/select_algorithm.py"))
            continue;
        cr_expect_eq(st->category, MT_CAT_COMPILATION, "category %u", st->category);
        choosing += st->bytes;
    }
    cr_expect_gt(choosing, 390 * MiB, "%llu", (unsigned long long)choosing);
    cr_expect_eq(d->by_category_at_peak[MT_CAT_COMPILATION], choosing);
    cr_expect_eq(d->by_category_at_peak[MT_CAT_ACTIVATIONS], 0);
    cr_expect_eq(d->by_category_at_peak[MT_CAT_OTHER], 0);
    mt_analysis_free(a);
    a = fixture_analysis("resnet18_compile_tensors");
    cr_expect_eq(fx_dev(a, 0)->by_category_at_peak[MT_CAT_COMPILATION], 0);
    cr_expect_gt(fx_dev(a, 0)->by_category_at_peak[MT_CAT_ACTIVATIONS], 0);
    mt_analysis_free(a);
}

/* A batch augmented on the GPU (H200, train.py --model resnet18 --gpu-augment: torchvision's v2
 * transforms, which are Modules, crop, flip and normalize 32 uint8 images to the model's float
 * input). What they make outside the model's forward is an input: the normalized batch live at the
 * peak, 32 x 3 x 224 x 224 floats, read "activations" before. */
Test(categories, gpu_augmented_batch_is_an_input)
{
    const mt_device_report *d;
    mt_analysis *a = gpu_fixture("resnet18_augment_tensors", &d);
    uint64_t augmented = peak_bytes_under(a, d, "torchvision/transforms/", MT_CAT_INPUTS);
    cr_expect_eq(augmented, 32ull * 3 * 224 * 224 * 4, "the normalized batch at the peak: %llu",
                 (unsigned long long)augmented);
    cr_expect_geq(d->by_category_at_peak[MT_CAT_INPUTS], augmented);
    mt_analysis_free(a);
}

/* GPT-2's peak is at the end of its forward pass: no gradient exists then (zero_grad set them
 * to None), activations are most of the peak. AdamW's state in bf16 autocast is exactly 2W. */
Test(categories, gpt2_peak_in_forward)
{
    mt_analysis *a = fixture_analysis("gpt2_amp_tensors");
    const mt_device_report *d = fx_dev(a, 0);
    const uint64_t *c = d->by_category_at_peak;
    cr_expect_eq(c[MT_CAT_GRADIENTS], 0);
    cr_expect_gt(c[MT_CAT_ACTIVATIONS], d->by_kind_at_peak[MT_KIND_TENSOR] / 3);
    cr_expect_eq((double)c[MT_CAT_OPTIMIZER_STATE], stat_of("gpt2_amp_tensors", "optimizer_state_bytes"));
    cr_expect_eq((double)c[MT_CAT_PARAMETERS], stat_of("gpt2_amp_tensors", "param_bytes"));
    mt_analysis_free(a);
}

/* DDP: the reducer's buckets are gradients (they mirror no single parameter). */
Test(categories, ddp_buckets_are_gradients)
{
    mt_analysis *a = fixture_analysis("ddp_rank0");
    const mt_device_report *d = fx_dev(a, 0);
    const uint64_t w = d->by_category_at_peak[MT_CAT_PARAMETERS];
    cr_assert_gt(w, 0);
    cr_expect_geq(d->fit_at_peak[0].unpaired, w, "buckets: at least W beside the .grad tensors");
    cr_expect_eq(d->fit_at_peak[0].paired, w, "a .grad for every parameter");
    mt_analysis_free(a);
}

/* bench_compact --tensors' trace (synth_file.c), which the README's tensor figures are timed on:
 * the analysis must find in it what it finds in a training run's, or the benchmark times the wrong
 * work. Its tensor peak is the allocator's counter's maximum, read back from the events, and every
 * byte of it has a category, among them the forward's, the backward's and the optimizer's. */
Test(categories, the_benchmarks_tensor_trace_has_a_training_runs_categories)
{
    char path[512];
    mt_test_tmpname(path, sizeof path, "synth_tensors.mtrace");
    cr_assert_eq(mt_synth_file_write_tensors(path, 200000, 9), 0);
    char err[256];
    mt_reader *r = mt_reader_open(path, err, sizeof err);
    cr_assert_not_null(r, "%s", err);
    mt_record rec;
    uint64_t counter_max = 0, tensors = 0;
    while (mt_reader_next(r, &rec) == MT_READ_RECORD) {
        if (rec.type != MT_REC_EVENT || rec.u.event.kind != MT_KIND_TENSOR) continue;
        tensors++;
        if (rec.u.event.aux > counter_max) counter_max = rec.u.event.aux;
    }
    mt_reader_close(r);
    cr_assert_eq(tensors, 200000);
    mt_analysis *a = fx_analyze(path);
    cr_assert_eq(a->n_devices, 1);
    const mt_device_report *d = &a->devices[0];
    cr_assert_eq(d->u.peak, counter_max, "peak %llu, the counter's maximum %llu",
                 (unsigned long long)d->u.peak, (unsigned long long)counter_max);
    cr_assert_eq(d->by_kind_at_peak[MT_KIND_TENSOR], counter_max);
    cr_assert(d->categories_known);
    uint64_t sum = 0;
    for (int c = 0; c < MT_CAT_MAX; c++)
        sum += d->by_category_at_peak[c];
    cr_assert_eq(sum, counter_max, "every tensor byte at the peak has a category");
    cr_assert_gt(d->by_category_at_peak[MT_CAT_ACTIVATIONS], 0);
    cr_assert_gt(
        d->by_category_at_peak[MT_CAT_BACKWARD_TEMP] + d->by_category_at_peak[MT_CAT_GRADIENTS], 0);
    cr_assert_gt(d->by_category_at_peak[MT_CAT_OPTIMIZER_TEMP] +
                     d->by_category_at_peak[MT_CAT_OPTIMIZER_STATE],
                 0);
    cr_assert(d->after_backward_known, "a backward pass ended after the peak");
    mt_analysis_free(a);
    unlink(path);
}

/* Inference (samples/generate.py on an H200: a 2-layer GPT-2-like model, 4 heads of 64, float16,
 * 2 prompts of 16 tokens, 24 new ones greedily and then with 2 beams): transformers' KV cache is a
 * category of its own and of the model's shape, generate()'s own tensors are the generation
 * loop's, and a trace with no backward pass expects no gradient. Every cache tensor is sequences x heads x tokens x head size, so its bytes are whole
 * rows of heads x head size x 2 bytes; at most the whole cache of the beam round (2 x layers x 4
 * sequences x 40 tokens) plus one layer's old copy (torch.cat holds both for a moment). */
Test(categories, inference_kv_cache_of_the_models_shape)
{
    const char *name = "generate_small_tensors";
    char path[1024];
    fixture_path(name, path, sizeof path);
    double heads = stat_of("generate_small_tensors.stats", "heads");
    double head_dim = stat_of("generate_small_tensors.stats", "head_dim");
    double elem = stat_of("generate_small_tensors.stats", "elem_bytes");
    double layers = stat_of("generate_small_tensors.stats", "layers");
    double seqs = stat_of("generate_small_tensors.stats", "batch") *
                  stat_of("generate_small_tensors.stats", "beams");
    double tokens = stat_of("generate_small_tensors.stats", "tokens");
    double max_alloc = stat_of("generate_small_tensors.stats", "max_allocated");
    double params = stat_of("generate_small_tensors.stats", "param_bytes");
    cr_assert(heads > 0 && head_dim > 0 && elem > 0 && layers > 0 && seqs > 0 && tokens > 0);
    mt_analysis *a = fx_analyze(path);
    const mt_device_report *d = fx_dev(a, 0);
    cr_assert(d->categories_known);
    const uint64_t *c = d->by_category_at_peak;
    uint64_t sum = 0;
    for (unsigned x = 0; x < MT_CAT_MAX; x++) sum += c[x];
    cr_expect_eq((double)sum, max_alloc, "the categories add up to max_memory_allocated");
    uint64_t row = (uint64_t)(heads * head_dim * elem);
    uint64_t full = (uint64_t)(2 * layers * seqs * tokens) * row;
    uint64_t layer_copy = (uint64_t)(2 * seqs * tokens) * row;
    cr_expect_gt(c[MT_CAT_KV_CACHE], 0, "the cache is live at the peak");
    cr_expect_eq(c[MT_CAT_KV_CACHE] % row, 0, "%llu B: whole rows of %llu B",
                 (unsigned long long)c[MT_CAT_KV_CACHE], (unsigned long long)row);
    cr_expect_leq(c[MT_CAT_KV_CACHE], full + layer_copy);
    cr_expect_lt(rel_diff((double)c[MT_CAT_PARAMETERS], params), 0.01);
    cr_expect_eq(c[MT_CAT_GRADIENTS] + c[MT_CAT_BACKWARD_TEMP] + c[MT_CAT_OPTIMIZER_STATE] +
                     c[MT_CAT_OPTIMIZER_TEMP], 0);
    cr_expect_not(mt_categorizer_saw_backward(a->categories));
    /* generate()'s own tensors (scores, beams, token ids) are the generation loop's, whatever op
     * made them: none of them left among the inputs or in "other" */
    cr_expect_gt(c[MT_CAT_GENERATION], 0);
    const mt_path_opts long_all = {.style = MT_NAME_LONG, .filter = MT_FRAMES_ALL};
    for (size_t k = 0; k < d->peak_stacks.n; k++) {
        const mt_stack_stat *s = &d->peak_stacks.v[k];
        if (s->category != MT_CAT_OTHER && s->category != MT_CAT_INPUTS) continue;
        const char *names[256];
        size_t n = mt_frames_path(a->frames, s->stack, long_all, names, 256);
        for (size_t i = 0; i < n && i < 256; i++)
            cr_expect_null(strstr(names[i], "transformers/generation/"), "%s: %s",
                           mt_category_name(a->categories, s->category), names[i]);
    }
    /* the table: no textbook gradients (they would widen the total's difference by W), and the
     * cache's own line */
    mt_cat_table t;
    cr_assert_eq(mt_category_table(a, d, &t), 0);
    const mt_cat_row *grads = table_row(&t, MT_CAT_GRADIENTS), *kv = table_row(&t, MT_CAT_KV_CACHE);
    cr_assert(grads && kv);
    cr_expect_not(grads->has_textbook);
    cr_expect(strstr(grads->why, "no backward pass"), "%s", grads->why);
    cr_expect_str_eq(kv->name, "KV cache");
    cr_expect_eq(kv->bytes, c[MT_CAT_KV_CACHE]);
    cr_expect(strstr(kv->why, "inference"), "%s", kv->why);
    mt_analysis_free(a);
}

/* Training: transformers keeps its cache in a training forward too (use_cache defaults to True),
 * one copy of every layer's keys and values. GPT-2-like of samples/train.py (4 layers, 8 heads of
 * 64, batch 8 x 256 tokens): 2 x 4 x 8 x 8 x 256 x 64 elements at the peak, the whole cache of
 * the forward pass, in float32 (4 bytes) and under bf16 autocast (2). The line says how to do
 * without (use_cache=False measured 31 MiB lower on the same model: docs/analysis.md). */
Test(categories, training_kv_cache_is_the_whole_forward_cache)
{
    static const struct {
        const char *name;
        uint64_t elem;
    } runs[] = {{"gpt2_tensors", 4}, {"gpt2_amp_tensors", 2}};
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        mt_analysis *a = fixture_analysis(runs[i].name);
        const mt_device_report *d = fx_dev(a, 0);
        cr_expect_eq(d->by_category_at_peak[MT_CAT_KV_CACHE],
                     2ull * 4 * 8 * 8 * 256 * 64 * runs[i].elem, "%s", runs[i].name);
        cr_expect(mt_categorizer_saw_backward(a->categories));
        mt_cat_table t;
        mt_category_table(a, d, &t);
        const mt_cat_row *kv = table_row(&t, MT_CAT_KV_CACHE);
        cr_assert(kv, "%s: the cache's line", runs[i].name);
        cr_expect(strstr(kv->why, "use_cache=False"), "%s", kv->why);
        mt_analysis_free(a);
    }
}

/* The KV cache's rule, by construction: transformers' StaticCache makes its buffers in its
 * constructor (a KV cache, not parameters: the constructor rule comes after), vLLM's cache engine
 * and SGLang's token pool by their names, a forward that fills a cache through cache_utils.py;
 * a file of the user's own called cache_utils.py and a forward are not a cache. */
Test(categories, kv_cache_by_construction)
{
    fx f;
    fx_open(&f, "kv.mtrace");
    fx_process(&f, "python3", "python3 serve.py");
    pycode(&f, 1, "/home/u/serve.py", "<module>");
    pycode(&f, 2, "/venv/lib/python3.12/site-packages/transformers/cache_utils.py",
           "StaticCache.__init__");
    pycode(&f, 3, "/venv/lib/python3.12/site-packages/vllm/worker/cache_engine.py",
           "CacheEngine._allocate_kv_cache");
    pycode(&f, 4, "/venv/lib/python3.12/site-packages/sglang/srt/mem_cache/memory_pool.py",
           "MHATokenToKVPool._create_buffers");
    pycode(&f, 5, "/venv/lib/python3.12/site-packages/torch/nn/modules/module.py",
           "Module._call_impl");
    pycode(&f, 6, "/venv/lib/python3.12/site-packages/transformers/models/llama/modeling_llama.py",
           "LlamaAttention.forward");
    pycode(&f, 7, "/venv/lib/python3.12/site-packages/transformers/cache_utils.py",
           "DynamicLayer.update");
    pycode(&f, 8, "/home/u/cache_utils.py", "Memo.__init__");
    fx_node(&f, 1, 0, PY(1, 10), MT_FRAME_PYTHON);
    fx_node(&f, 2, 1, PY(2, 1100), MT_FRAME_PYTHON);
    fx_node(&f, 3, 1, PY(3, 60), MT_FRAME_PYTHON);
    fx_node(&f, 4, 1, PY(4, 300), MT_FRAME_PYTHON);
    fx_node(&f, 5, 1, PY(5, 1790), MT_FRAME_PYTHON);
    fx_node(&f, 6, 5, PY(6, 270), MT_FRAME_PYTHON);
    fx_node(&f, 7, 6, PY(7, 146), MT_FRAME_PYTHON);
    fx_node(&f, 8, 1, PY(8, 5), MT_FRAME_PYTHON);
    tensor(&f, MT_OP_ALLOC, A + 0x000, 8 * MiB, 1, 2, MAIN_TID);  /* StaticCache's buffers */
    tensor(&f, MT_OP_ALLOC, A + 0x100, 16 * MiB, 2, 3, MAIN_TID); /* vLLM */
    tensor(&f, MT_OP_ALLOC, A + 0x200, 4 * MiB, 3, 4, MAIN_TID);  /* SGLang */
    tensor(&f, MT_OP_ALLOC, A + 0x300, 2 * MiB, 4, 7, MAIN_TID);  /* DynamicCache grows */
    tensor(&f, MT_OP_ALLOC, A + 0x400, 1 * MiB, 5, 6, MAIN_TID);  /* the forward's own */
    tensor(&f, MT_OP_ALLOC, A + 0x500, 512, 6, 8, MAIN_TID);      /* the user's cache_utils.py */
    fx_end(&f, 7, 0, 0);
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    const mt_device_report *d = fx_dev(a, 0);
    const uint64_t *c = d->by_category_at_peak;
    cr_expect_eq(c[MT_CAT_KV_CACHE], 30 * MiB);
    cr_expect_eq(c[MT_CAT_ACTIVATIONS], 1 * MiB);
    cr_expect_eq(c[MT_CAT_PARAMETERS], 512, "a constructor outside transformers is construction");
    cr_expect_not(mt_categorizer_saw_backward(a->categories));
    mt_analysis_free(a);
}

/* transformers' Trainer through Accelerate (samples/hf_trainer.py on an H200: bf16, gradient
 * checkpointing, clipping, its default fused AdamW). Accelerator.backward divides the loss before
 * it calls loss.backward(): that scalar is not a gradient, and the gradients after the backward
 * pass are exactly PyTorch's. Fused AdamW keeps a step count per parameter on the GPU: PyTorch's
 * state bytes less the paired copies are 4 bytes per count, each count one 512-byte block, and the
 * table says what they are. */
Test(categories, hf_trainer_gradients_and_step_counts)
{
    char path[1024];
    fixture_path("hf_trainer_tensors", path, sizeof path);
    double grads = stat_of("hf_trainer_tensors", "grad_bytes");
    double state = stat_of("hf_trainer_tensors", "optimizer_state_bytes");
    double max_alloc = stat_of("hf_trainer_tensors", "max_allocated");
    cr_assert(grads > 0 && state > 0 && max_alloc > 0);
    mt_analysis *a = fx_analyze(path);
    const mt_device_report *d = fx_dev(a, 0);
    uint64_t sum = 0;
    for (unsigned x = 0; x < MT_CAT_MAX; x++) sum += d->by_category_at_peak[x];
    cr_expect_eq((double)sum, max_alloc);
    cr_assert(d->after_backward_known);
    const mt_category_fit *fg = &d->fit_after_backward[0];
    cr_expect_eq((double)fg->paired, grads, "gradients paired %llu", (unsigned long long)fg->paired);
    cr_expect_eq(fg->n_unpaired, 0, "no gradient the size of no parameter");
    cr_expect_eq(d->by_category_after_backward[MT_CAT_GRADIENTS], fg->paired + fg->larger);
    const mt_category_fit *fs = &d->fit_at_peak[1];
    cr_assert_gt(fs->n_unpaired, 0);
    cr_expect_eq(fs->unpaired, 512 * fs->n_unpaired, "each count one 512-byte block");
    cr_expect_eq((double)(4 * fs->n_unpaired), state - (double)fs->paired,
                 "PyTorch's state = the paired copies + 4 bytes a count");
    mt_cat_table t;
    mt_category_table(a, d, &t);
    const mt_cat_row *r = table_row(&t, MT_CAT_OPTIMIZER_STATE);
    cr_assert(r);
    cr_expect(strstr(r->why, "step count"), "the state's line says what the small tensors are");
    mt_analysis_free(a);
}

/* sgd_without_momentum_keeps_no_state on the GPU (samples/train.py --optim sgd0, H200): PyTorch's
 * optimizer holds no state, and the table expects none. */
Test(categories, gpu_sgd_without_momentum)
{
    char path[1024];
    fixture_path("resnet18_sgd0_tensors", path, sizeof path);
    cr_assert_eq(stat_of("resnet18_sgd0_tensors", "optimizer_state_bytes"), 0);
    mt_analysis *a = fx_analyze(path);
    mt_cat_table t;
    cr_assert_eq(mt_category_table(a, fx_dev(a, 0), &t), 0);
    cr_expect_str_eq(t.optimizer, "SGD (no momentum)");
    cr_expect_eq(t.state_in_w, 0);
    const mt_cat_row *r = table_row(&t, MT_CAT_OPTIMIZER_STATE);
    cr_assert(r);
    cr_expect(r->bytes == 0 && r->has_textbook && r->textbook == 0);
    mt_analysis_free(a);
}

/* The backward pass after the peak gives the 1 MiB parameter no gradient, but Adam holds its
 * state (a GAN's discriminator pass, after both optimizers' steps): the gradients do not say what
 * is trained, and W stays the textbook. */
Test(categories, state_vetoes_w_t)
{
    fx f;
    adam_trace_of(&f, "categories_one_grad.mtrace", 0);
    mt_analysis *a = fx_analyze(f.path);
    const mt_device_report *d = fx_dev(a, 0);
    cr_assert(d->after_backward_known);
    cr_expect_eq(d->fit_after_backward[0].params_left, 1 * MiB, "the 1 MiB parameter had none");
    mt_cat_table t;
    cr_assert_eq(mt_category_table(a, d, &t), 0);
    cr_expect_eq(t.w_trained, t.w);
    cr_expect_eq(t.w, 5 * MiB);
    mt_analysis_free(a);
}

/* Fine-tuning (H200, samples/train.py): a ResNet-18 with its backbone frozen (fc alone trained),
 * a GPT-2-like model with LoRA adapters beside each attention projection (the model frozen), and
 * the same model with its last block alone trained. W_t, the parameters with a gradient after the
 * backward pass, is PyTorch's trained parameters within what sizes cannot tell apart (the paired
 * blocks' differences, 512 bytes a tensor); the gradients' textbook is W_t, Adam's state 2 W_t.
 * The last: the trained c_fc's gradient sat in a 5 MiB block and c_attn's in a 4 MiB one, which
 * by size alone are a frozen c_fc's exactly and another 4 MiB one's, so W_t reads 1 MiB over:
 * within the bound, which is the point of the bound. Full training keeps W. */
Test(categories, fine_tuning_trains_w_t)
{
    static const char *const tuned[] = {"resnet18_finetune_tensors", "gpt2_lora_tensors",
                                        "gpt2_freeze_tensors"};
    for (size_t i = 0; i < sizeof tuned / sizeof *tuned; i++) {
        char path[1024];
        fixture_path(tuned[i], path, sizeof path);
        double grads = stat_of(tuned[i], "grad_bytes"), state = stat_of(tuned[i], "optimizer_state_bytes");
        double params = stat_of(tuned[i], "param_bytes");
        cr_assert(grads > 0 && state > 0 && params > grads, "%s: its .json", tuned[i]);
        mt_analysis *a = fx_analyze(path);
        const mt_device_report *d = fx_dev(a, 0);
        mt_cat_table t;
        cr_assert_eq(mt_category_table(a, d, &t), 0);
        cr_assert(d->after_backward_known, "%s", tuned[i]);
        const mt_category_fit *fg = &d->fit_after_backward[0];
        double slack = (double)(fg->larger + fg->smaller + 512 * fg->n_paired);
        cr_expect_lt(t.w_trained, t.w, "%s: W_t below W", tuned[i]);
        cr_expect_leq(fabs((double)t.w_trained - grads), slack, "%s: W_t %llu vs PyTorch's %.0f",
                      tuned[i], (unsigned long long)t.w_trained, grads);
        const mt_category_fit *fs = &d->fit_at_peak[1];
        cr_expect_leq(fabs((double)fs->paired - state),
                      (double)(fs->larger + fs->smaller + 512 * fs->n_paired),
                      "%s: state paired %llu vs %.0f", tuned[i], (unsigned long long)fs->paired, state);
        const mt_cat_row *g = table_row(&t, MT_CAT_GRADIENTS);
        const mt_cat_row *st = table_row(&t, MT_CAT_OPTIMIZER_STATE);
        const mt_cat_row *w = table_row(&t, MT_CAT_PARAMETERS);
        cr_assert(g && st && w, "%s", tuned[i]);
        cr_expect_eq(g->textbook, t.w_trained, "%s", tuned[i]);
        cr_expect_eq(st->textbook, 2 * t.w_trained, "%s: Adam's 2 W_t", tuned[i]);
        cr_expect(strstr(w->why, "frozen") != NULL, "%s: %s", tuned[i], w->why);
        mt_analysis_free(a);
    }
    /* full training: every parameter trained, W as before (buffers and the pairing's slack do
     * not make a W_t); gan_tensors (samples/gan.py, H200) trains two models with two optimizers,
     * where the backward pass after the peak (the generator's, through the discriminator) gives
     * both their gradients */
    static const char *const full[] = {"resnet18_tensors", "gpt2_tensors", "hf_trainer_tensors",
                                       "ddp_rank0", "ddp_stray_rank1", "gan_tensors"};
    for (size_t i = 0; i < sizeof full / sizeof *full; i++) {
        mt_analysis *a = fixture_analysis(full[i]);
        mt_cat_table t;
        cr_assert_eq(mt_category_table(a, fx_dev(a, 0), &t), 0);
        cr_expect_eq(t.w_trained, t.w, "%s", full[i]);
        mt_analysis_free(a);
    }
}

/* Training frameworks' own backward methods wrap loss.backward(): what they make first (the loss
 * divided or scaled) is made before the pass, whatever the framework (DeepSpeed's too). An
 * autograd.Function's backward runs in the pass, as the engine runs it on its worker: under
 * BackwardCFunction.apply (torch/autograd/function.py), as in every GPU trace of one. */
Test(categories, framework_backward_wrappers_are_not_the_pass)
{
    fx f;
    fx_open(&f, "wrappers.mtrace");
    fx_process(&f, "python3", "python3 fit.py");
    pycode(&f, 1, "/home/u/fit.py", "<module>");
    pycode(&f, 2, "/venv/lib/python3.12/site-packages/accelerate/accelerator.py",
           "Accelerator.backward");
    pycode(&f, 3, "/venv/lib/python3.12/site-packages/pytorch_lightning/core/module.py",
           "LightningModule.backward");
    pycode(&f, 4, "/venv/lib/python3.12/site-packages/lightning/pytorch/plugins/precision/amp.py",
           "MixedPrecision.backward");
    pycode(&f, 5, "/home/u/ops.py", "MyOp.backward");
    pycode(&f, 6, "/venv/lib/python3.12/site-packages/torch/autograd/function.py",
           "BackwardCFunction.apply");
    pycode(&f, 7, "/venv/lib/python3.12/site-packages/deepspeed/runtime/engine.py",
           "DeepSpeedEngine.backward");
    fx_node(&f, 1, 0, PY(1, 10), MT_FRAME_PYTHON);
    fx_node(&f, 2, 1, PY(2, 2851), MT_FRAME_PYTHON);
    fx_node(&f, 3, 1, PY(3, 1100), MT_FRAME_PYTHON);
    fx_node(&f, 4, 1, PY(4, 70), MT_FRAME_PYTHON);
    fx_node(&f, 5, 0, PY(6, 317), MT_FRAME_PYTHON); /* the worker's Python starts here */
    fx_node(&f, 6, 5, PY(5, 12), MT_FRAME_PYTHON);
    fx_node(&f, 7, 1, PY(7, 2000), MT_FRAME_PYTHON);
    tensor(&f, MT_OP_ALLOC, A + 0x000, 512, 1, 2, MAIN_TID);
    tensor(&f, MT_OP_ALLOC, A + 0x100, 512, 2, 3, MAIN_TID);
    tensor(&f, MT_OP_ALLOC, A + 0x200, 512, 3, 4, MAIN_TID);
    tensor(&f, MT_OP_ALLOC, A + 0x300, 1 * MiB, 4, 6, AUTOGRAD_TID);
    tensor(&f, MT_OP_ALLOC, A + 0x400, 512, 5, 7, MAIN_TID);
    fx_end(&f, 6, 0, 0);
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    const uint64_t *c = fx_dev(a, 0)->by_category_at_peak;
    cr_expect_eq(c[MT_CAT_OTHER], 4 * 512, "the wrappers' scalars");
    cr_expect_eq(c[MT_CAT_BACKWARD_TEMP] + c[MT_CAT_GRADIENTS], 1 * MiB, "the Function's backward");
    mt_analysis_free(a);
}
