/* Frame names a person reads: C++ signatures shortened (real demangled names from PyTorch 2.11
 * traces), Python frames as "qualname (short/path.py:LINE)", the user's view of a stack (Python
 * frames, ATen operators, autograd nodes, the allocating library) and the first user frame, which
 * is never an allocator or CUDA frame. */
#include "test_compact_fixture.h"

#include "compact/internal.h"

#define NODE(i, p, ip_, k) {.type = MT_REC_STACK_NODE, .u.node = {.id = i, .parent = p, .ip = ip_, .frame_kind = k}}
#define MOD(i, path_, s, e) {.type = MT_REC_MODULE, .u.module = {.id = i, .bias = s, .start = s, .end = e, .path = path_}}
#define SYM(ip_, fn) {.type = MT_REC_SYMBOL, .u.symbol = {.ip = ip_, .function = fn, .file = ""}}
#define PYC(i, file_, q) {.type = MT_REC_PYCODE, .u.pycode = {.id = i, .filename = file_, .qualname = q}}
#define PY(code, line) MT_PY_IP(code, line)

static const struct {
    const char *in, *out;
} cxx[] = {
    {"at::native::cudnn_convolution_backward_weight(c10::ArrayRef<long>, at::Tensor const&, "
     "at::Tensor const&, c10::ArrayRef<long>, c10::ArrayRef<long>, c10::ArrayRef<long>, long, "
     "bool, bool, bool)",
     "at::native::cudnn_convolution_backward_weight"},
    {"std::vector<at::Tensor, std::allocator<at::Tensor> > torch::autograd::generated::"
     "NllLossBackward0::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)",
     "torch::autograd::generated::NllLossBackward0::apply"},
    {"c10::cuda::CUDACachingAllocator::CudaMallocAsync::(anonymous namespace)::mallocAsync(void**, "
     "signed char, unsigned long, CUstream_st*)",
     "c10::cuda::CUDACachingAllocator::CudaMallocAsync::(anon)::mallocAsync"},
    {"c10::impl::wrap_kernel_functor_unboxed_<c10::impl::detail::WrapFunctionIntoFunctor_<c10::"
     "CompileTimeFunctionPointer<at::Tensor (at::Tensor const&, long, bool), &at::(anonymous "
     "namespace)::wrapper_CUDA__log_softmax>, at::Tensor, c10::guts::typelist::typelist<at::Tensor "
     "const&, long, bool> >, at::Tensor (at::Tensor const&, long, bool)>::call(c10::OperatorKernel*, "
     "c10::DispatchKeySet, at::Tensor const&, long, bool)",
     "c10::impl::wrap_kernel_functor_unboxed_::call"},
    {"torch::autograd::Node::operator()(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)",
     "torch::autograd::Node::operator()"},
    {"_object* torch::autograd::TypeError_to_NotImplemented_<&torch::autograd::THPVariable_add>("
     "_object*, _object*, _object*)",
     "torch::autograd::TypeError_to_NotImplemented_"},
    {"at::empty(c10::ArrayRef<long>, c10::TensorOptions, std::optional<c10::MemoryFormat>) [clone "
     ".constprop.0]",
     "at::empty"},
    {"at::native::foo(at::Tensor const&)::{lambda(int)#1}::operator()(int) const",
     "at::native::foo::{lambda#1}::operator()"},
    {"bool std::operator< <char>(std::string const&, std::string const&)", "std::operator<"},
    {"std::ostream& std::operator<< <std::char_traits<char> >(std::ostream&, char const*)",
     "std::operator<<"},
    {"void* operator new[](unsigned long)", "operator new[]"},
    {"foo::Bar::operator unsigned long() const", "foo::Bar::operator unsigned long"},
    {"std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > "
     "c10::Error::what[abi:cxx11]() const",
     "c10::Error::what"},
    /* Rust's legacy mangling, as the C++ runtime demangles it (safetensors' reader under
     * load_file, an H200 trace): escapes decoded, the hash dropped, as gdb prints it */
    {"_$LT$pyo3..instance..Bound$LT$pyo3..types..any..PyAny$GT$$u20$as$u20$pyo3..types..any.."
     "PyAnyMethods$GT$::call::h6b1a7712e1a6ba52",
     "<pyo3::instance::Bound<pyo3::types::any::PyAny> as pyo3::types::any::PyAnyMethods>::call"},
    {"safetensors_rust::Open::get_tensor::h4ff331997867cb7a", "safetensors_rust::Open::get_tensor"},
    {"core::ptr::drop_in_place$LT$$RF$mut$u20$T$GT$::h0123456789abcdef",
     "core::ptr::drop_in_place<&mut T>"},
    /* not Rust's: a hash that is not 16 hex digits, an escape rustc never writes */
    {"foo::h0123456789abcdeg", "foo::h0123456789abcdeg"},
    {"a$XX$b::h0123456789abcdef", "a$XX$b::h0123456789abcdef"},
    {"cudaMallocAsync", "cudaMallocAsync"},
    {"libcuda.so.1+0x2a1b3c", "libcuda.so.1+0x2a1b3c"},
    {"main", "main"},
    {"deep_fn_3", "deep_fn_3"},
    {"vtable for c10::Error", "vtable for c10::Error"},
    {"step 42", "step 42"},
};

Test(names, cxx_short_names)
{
    char out[512];
    for (size_t i = 0; i < sizeof cxx / sizeof *cxx; i++) {
        size_t n = mt_cxx_short_name(cxx[i].in, out, sizeof out);
        cr_expect_str_eq(out, cxx[i].out, "%s", cxx[i].in);
        cr_expect_eq(n, strlen(out));
    }
}

/* Malformed input (brackets that never close, stray closers, a tiny buffer) stays bounded and
 * terminated. */
Test(names, cxx_short_names_malformed)
{
    const char *bad[] = {"a<b(c", "a)b>c(", "(((((", ">>>>", "operator", "operator (",
                         "{lambda(", "[clone", "", " ", "a::b<c>::", "((anonymous namespace)",
                         "_$LT$a..b$GT$::h0123456789abcdef", "$u7$::h0123456789abcdef",
                         "::h0123456789abcdef"};
    char out[8];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        size_t n = mt_cxx_short_name(bad[i], out, sizeof out);
        cr_expect(n < sizeof out && out[n] == 0, "%s", bad[i]);
    }
    /* pseudo-random bytes */
    uint64_t x = 12345;
    char in[200];
    for (int round = 0; round < 2000; round++) {
        for (size_t k = 0; k + 1 < sizeof in; k++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            in[k] = "ab:<>() {}[]#,&*operator"[(x >> 33) % 24];
        }
        in[sizeof in - 1] = 0;
        char big[256];
        size_t n = mt_cxx_short_name(in, big, sizeof big);
        cr_assert(n < sizeof big && big[n] == 0);
    }
}

Test(names, roles)
{
    char user[128];
    cr_expect_eq(mt_frame_role_of("at::_ops::linear::call(at::Tensor const&, at::Tensor const&, "
                                  "std::optional<at::Tensor> const&)", user, sizeof user),
                 MT_ROLE_ATEN);
    cr_expect_str_eq(user, "aten::linear");
    cr_expect_eq(mt_frame_role_of("at::_ops::_log_softmax::redispatch(c10::DispatchKeySet, "
                                  "at::Tensor const&, long, bool)", user, sizeof user),
                 MT_ROLE_ATEN);
    cr_expect_str_eq(user, "aten::_log_softmax");
    cr_expect_eq(mt_frame_role_of("torch::autograd::generated::ConvolutionBackward0::apply(std::"
                                  "vector<at::Tensor, std::allocator<at::Tensor> >&&)", user,
                                  sizeof user),
                 MT_ROLE_AUTOGRAD_NODE);
    cr_expect_str_eq(user, "ConvolutionBackward0");
    cr_expect_eq(mt_frame_role_of("torch::autograd::AccumulateGrad::apply(std::vector<at::Tensor, "
                                  "std::allocator<at::Tensor> >&&)", user, sizeof user),
                 MT_ROLE_AUTOGRAD_NODE);
    cr_expect_str_eq(user, "AccumulateGrad");
    /* a C++ autograd function (torchvision's RoIAlign, recorded on an H200: detection_tensors):
     * its backward node is named after the function, as PyTorch names a Python function's; its
     * forward, Function<T>::apply, runs in the forward pass and is no node at all */
    cr_expect_eq(mt_frame_role_of("torch::autograd::CppNode<vision::ops::(anonymous namespace)::"
                                  "ROIAlignFunction>::apply(std::vector<at::Tensor, std::allocator"
                                  "<at::Tensor> >&&)", user, sizeof user),
                 MT_ROLE_AUTOGRAD_NODE);
    cr_expect_str_eq(user, "ROIAlignFunctionBackward");
    cr_expect_eq(mt_frame_role_of("std::enable_if<is_same_v<vision::ops::(anonymous namespace)::"
                                  "ROIAlignFunction, vision::ops::(anonymous namespace)::"
                                  "ROIAlignFunction>, decltype (vision::ops::(anonymous namespace)::"
                                  "ROIAlignFunction::forward(decltype(nullptr), (declval<at::Tensor "
                                  "const&>)()))>::type torch::autograd::Function<vision::ops::"
                                  "(anonymous namespace)::ROIAlignFunction>::apply<vision::ops::"
                                  "(anonymous namespace)::ROIAlignFunction, at::Tensor const&>(at::"
                                  "Tensor const&)", user, sizeof user),
                 MT_ROLE_PLAIN);
    cr_expect_eq(mt_frame_role_of("torch::autograd::CppNode::apply", user, sizeof user),
                 MT_ROLE_AUTOGRAD_NODE, "a short name: no template argument to name it by");
    cr_expect_str_eq(user, "CppNode");
    cr_expect_eq(mt_frame_role_of("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::"
                                  "alloc_block(c10::cuda::CUDACachingAllocator::Native::(anonymous "
                                  "namespace)::AllocParams&, bool)", user, sizeof user),
                 MT_ROLE_ALLOCATOR);
    cr_expect_str_eq(user, MT_OWNER_CACHING_ALLOCATOR);
    /* the other backend lives in the same namespace: not the caching allocator */
    cr_expect_eq(mt_frame_role_of("c10::cuda::CUDACachingAllocator::CudaMallocAsync::(anonymous "
                                  "namespace)::mallocAsync(void**, signed char, unsigned long, "
                                  "CUstream_st*)",
                                  user, sizeof user),
                 MT_ROLE_ALLOCATOR);
    cr_expect_str_eq(user, MT_OWNER_ASYNC_ALLOCATOR);
    cr_expect_eq(mt_frame_role_of("libcublas.so.13+0x21815a", user, sizeof user), MT_ROLE_LIBRARY);
    cr_expect_str_eq(user, "cuBLAS");
    cr_expect_eq(mt_frame_role_of("void* at::cuda::getCUDABlasLtWorkspace<float>()", user, sizeof user),
                 MT_ROLE_LIBRARY, "a prefix rule sees the name without its return type");
    cr_expect_eq(mt_frame_role_of("at::native::cudnn_convolution(at::Tensor const&)", user, sizeof user),
                 MT_ROLE_PLAIN, "an ATen function named after cuDNN is not cuDNN");
    cr_expect_eq(mt_frame_role_of("cudnnConvolutionForward", user, sizeof user), MT_ROLE_LIBRARY);
    cr_expect_str_eq(user, "cuDNN");
    cr_expect_eq(mt_frame_role_of("torch::autograd::Node::operator()(std::vector<at::Tensor, "
                                  "std::allocator<at::Tensor> >&&)", user, sizeof user),
                 MT_ROLE_PLAIN);
    cr_expect_eq(mt_frame_role_of("at::native::linear(at::Tensor const&)", user, sizeof user),
                 MT_ROLE_PLAIN);
}

static mt_frames *frames_of(const mt_record *recs, size_t n)
{
    mt_frames *f = mt_frames_new();
    cr_assert(f);
    for (size_t i = 0; i < n; i++) cr_assert_eq(mt_frames_add(f, &recs[i]), 1);
    return f;
}

/* A forward allocation with Python frames, a backward one without, a C++-only one. */
static const mt_record torch_stacks[] = {
    MOD(1, "/venv/lib/python3.12/site-packages/torch/lib/libtorch_cpu.so", 0x100000, 0x200000),
    MOD(2, "/venv/lib/python3.12/site-packages/torch/lib/libc10_cuda.so", 0x200000, 0x300000),
    MOD(3, "/usr/local/cuda/lib64/libcudart.so.13", 0x300000, 0x400000),
    MOD(4, "/venv/lib/python3.12/site-packages/nvidia/cudnn/lib/libcudnn_cnn.so.9", 0x400000, 0x500000),
    MOD(5, "/usr/bin/app", 0x500000, 0x600000),
    PYC(1, "/home/u/proj/train.py", "main"),
    PYC(2, "/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py", "Linear.forward"),
    /* forward: train.py:main:10 -> linear.py:125 -> THPVariable_linear -> at::_ops::linear::call
     *   -> at::_ops::addmm::call -> at::_ops::addmm::redispatch -> alloc_block -> cudaMalloc */
    NODE(1, 0, PY(1, 10), MT_FRAME_PYTHON),
    NODE(2, 1, PY(2, 125), MT_FRAME_PYTHON),
    NODE(3, 2, 0x100010, MT_FRAME_NATIVE),
    NODE(4, 3, 0x100020, MT_FRAME_NATIVE),
    NODE(5, 4, 0x100030, MT_FRAME_NATIVE),
    NODE(6, 5, 0x100040, MT_FRAME_NATIVE),
    NODE(7, 6, 0x200010, MT_FRAME_NATIVE),
    NODE(8, 7, 0x300010, MT_FRAME_NATIVE),
    /* backward: [autograd backward] -> thread_main -> ConvolutionBackward0::apply ->
     *   at::_ops::convolution_backward::call -> libcudnn (no symbol) -> cudaMalloc */
    NODE(20, 0, MT_PSEUDO_AUTOGRAD, MT_FRAME_PSEUDO),
    NODE(21, 20, 0x100100, MT_FRAME_NATIVE),
    NODE(22, 21, 0x100110, MT_FRAME_NATIVE),
    NODE(23, 22, 0x100120, MT_FRAME_NATIVE),
    NODE(24, 23, 0x400abc, MT_FRAME_NATIVE),
    NODE(25, 24, 0x300010, MT_FRAME_NATIVE),
    /* C++ only: main -> make_buffer -> alloc_block -> cudaMalloc */
    NODE(30, 0, 0x500010, MT_FRAME_NATIVE),
    NODE(31, 30, 0x500020, MT_FRAME_NATIVE),
    NODE(32, 31, 0x200010, MT_FRAME_NATIVE),
    NODE(33, 32, 0x300010, MT_FRAME_NATIVE),
    SYM(0x100010, "torch::autograd::THPVariable_linear(_object*, _object*, _object*)"),
    SYM(0x100020, "at::_ops::linear::call(at::Tensor const&, at::Tensor const&, std::optional<at::Tensor> const&)"),
    SYM(0x100030, "at::_ops::addmm::call(at::Tensor const&, at::Tensor const&, at::Tensor const&, c10::Scalar const&, c10::Scalar const&)"),
    SYM(0x100040, "at::_ops::addmm::redispatch(c10::DispatchKeySet, at::Tensor const&, at::Tensor const&, at::Tensor const&, c10::Scalar const&, c10::Scalar const&)"),
    SYM(0x200010, "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::alloc_block(c10::cuda::CUDACachingAllocator::Native::(anonymous namespace)::AllocParams&, bool)"),
    SYM(0x300010, "cudaMalloc"),
    SYM(0x100100, "torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)"),
    SYM(0x100110, "torch::autograd::generated::ConvolutionBackward0::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)"),
    SYM(0x100120, "at::_ops::convolution_backward::call(at::Tensor const&, at::Tensor const&, at::Tensor const&)"),
    SYM(0x500010, "main"),
    SYM(0x500020, "make_buffer(unsigned long)"),
};

Test(names, user_view)
{
    mt_frames *f = frames_of(torch_stacks, sizeof torch_stacks / sizeof *torch_stacks);
    mt_frames_set_base_dir(f, "/home/u");
    cr_expect(mt_frames_has_python(f));
    cr_expect_eq(mt_frames_resolve(f, MT_FRAMES_AUTO), MT_FRAMES_USER);
    const char *names[32];
    uint8_t flags[32];
    size_t n = mt_frames_path(
        f, 8, (mt_path_opts){.style = MT_NAME_SHORT, .filter = MT_FRAMES_AUTO, .flags = flags},
        names, 32);
    const char *fwd[] = {"main (proj/train.py:10)", "Linear.forward (torch/nn/modules/linear.py:125)",
                         "aten::linear", "aten::addmm", MT_OWNER_CACHING_ALLOCATOR};
    cr_assert_eq(n, 5);
    for (size_t i = 0; i < n; i++) cr_expect_str_eq(names[i], fwd[i]);
    cr_expect(flags[2] & MT_FF_ROLE);
    n = mt_frames_path(
        f, 25, (mt_path_opts){.style = MT_NAME_SHORT, .filter = MT_FRAMES_USER, .flags = flags},
        names, 32);
    const char *bwd[] = {"[autograd backward]", "ConvolutionBackward0", "aten::convolution_backward",
                         "cuDNN"};
    cr_assert_eq(n, 4);
    for (size_t i = 0; i < n; i++) cr_expect_str_eq(names[i], bwd[i]);
    /* no Python frame, no operator: the first frame a user wrote, then the allocator */
    n = mt_frames_path(
        f, 33, (mt_path_opts){.style = MT_NAME_SHORT, .filter = MT_FRAMES_USER, .flags = flags},
        names, 32);
    cr_assert_eq(n, 2);
    cr_expect_str_eq(names[0], "make_buffer");
    cr_expect_str_eq(names[1], MT_OWNER_CACHING_ALLOCATOR);
    /* all frames, short and long */
    n = mt_frames_path(
        f, 8, (mt_path_opts){.style = MT_NAME_SHORT, .filter = MT_FRAMES_ALL, .flags = flags},
        names, 32);
    cr_assert_eq(n, 8);
    cr_expect_str_eq(names[2], "torch::autograd::THPVariable_linear");
    cr_expect_str_eq(names[6], "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::alloc_block");
    n = mt_frames_path(
        f, 8, (mt_path_opts){.style = MT_NAME_LONG, .filter = MT_FRAMES_ALL, .flags = flags}, names,
        32);
    cr_expect_str_eq(names[1], "Linear.forward (/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py:125)");
    cr_expect(strstr(names[3], "(at::Tensor const&"), "%s", names[3]);
    /* first user frames: never the allocator or CUDA */
    cr_expect_str_eq(mt_frames_first_user(f, 8, MT_NAME_SHORT),
                     "Linear.forward (torch/nn/modules/linear.py:125)");
    cr_expect_str_eq(mt_frames_first_user(f, 25, MT_NAME_SHORT), "ConvolutionBackward0");
    cr_expect_str_eq(mt_frames_first_user(f, 33, MT_NAME_SHORT), "make_buffer");
    cr_expect_str_eq(mt_frames_first_user(f, 5, MT_NAME_SHORT),
                     "Linear.forward (torch/nn/modules/linear.py:125)");
    /* owners: the innermost library or allocator */
    int alloc = 0;
    cr_expect_str_eq(mt_frames_owner(f, 8, &alloc), MT_OWNER_CACHING_ALLOCATOR);
    cr_expect(alloc);
    cr_expect_str_eq(mt_frames_owner(f, 25, &alloc), "cuDNN");
    cr_expect_not(alloc);
    mt_frames_free(f);
}

/* Who holds a block live at the end (the "live at the end" list, leaks): what an allocator reserved
 * for itself, of every kind a reservation can be (device memory, a virtual-memory handle, a pitched
 * block, managed memory: CuPy's pool over malloc_managed), is its cache and not a leak; what it
 * hands out is not; the driver's own memory is the driver's; a block asked for outside any
 * allocator is the program's. */
Test(names, an_allocators_reservations_are_its_cache_of_every_kind)
{
    mt_frames *f = frames_of(torch_stacks, sizeof torch_stacks / sizeof *torch_stacks);
    const char *holder = NULL;
    /* 33: main -> make_buffer -> alloc_block (the caching allocator) -> cudaMalloc */
    const uint8_t reserving[] = {MT_KIND_DEVICE, MT_KIND_VMM_PHYSICAL, MT_KIND_PITCH,
                                 MT_KIND_MANAGED};
    for (size_t i = 0; i < sizeof reserving; i++) {
        mt_lifetime l = {.kind = reserving[i], .stack = 33, .bytes = 2u << 20};
        holder = NULL;
        cr_expect_eq(mt_frames_holder(f, &l, &holder), MT_HOLD_CACHE, "kind %u", reserving[i]);
        cr_expect_str_eq(holder ? holder : "", MT_OWNER_CACHING_ALLOCATOR, "kind %u", reserving[i]);
    }
    mt_lifetime handed_out = {.kind = MT_KIND_TENSOR, .stack = 33, .bytes = 512};
    cr_expect_neq(mt_frames_holder(f, &handed_out, &holder), MT_HOLD_CACHE);
    mt_lifetime driver = {.kind = MT_KIND_DRIVER, .stack = 33, .bytes = 4096};
    cr_expect_eq(mt_frames_holder(f, &driver, &holder), MT_HOLD_DRIVER);
    /* 31: main -> make_buffer, no allocator and no library on the stack */
    mt_lifetime own = {.kind = MT_KIND_MANAGED, .stack = 31, .bytes = 4096};
    cr_expect_eq(mt_frames_holder(f, &own, &holder), MT_HOLD_PROGRAM);
    cr_expect_str_eq(holder, "program");
    mt_frames_free(f);
}

/* Without Python the default is every frame; the user view of such a stack still names it. */
Test(names, no_python_defaults_to_all)
{
    const mt_record recs[] = {
        MOD(5, "/usr/bin/app", 0x500000, 0x600000),
        MOD(3, "/usr/local/cuda/lib64/libcudart.so.13", 0x300000, 0x400000),
        NODE(30, 0, 0x500010, MT_FRAME_NATIVE),
        NODE(31, 30, 0x300010, MT_FRAME_NATIVE),
        SYM(0x500010, "int run<float>(Config const&)"),
        SYM(0x300010, "cudaMalloc"),
    };
    mt_frames *f = frames_of(recs, sizeof recs / sizeof *recs);
    cr_expect_not(mt_frames_has_python(f));
    cr_expect_eq(mt_frames_resolve(f, MT_FRAMES_AUTO), MT_FRAMES_ALL);
    const char *names[8];
    size_t n = mt_frames_path(
        f, 31, (mt_path_opts){.style = MT_NAME_SHORT, .filter = MT_FRAMES_AUTO}, names, 8);
    cr_assert_eq(n, 2);
    cr_expect_str_eq(names[0], "run");
    cr_expect_str_eq(mt_frames_first_user(f, 31, MT_NAME_SHORT), "run");
    n = mt_frames_path(f, 31, (mt_path_opts){.style = MT_NAME_SHORT, .filter = MT_FRAMES_USER},
                       names, 8);
    cr_assert_eq(n, 1);
    cr_expect_str_eq(names[0], "run");
    mt_frames_free(f);
}

/* Symbols appended after names were asked for (symbolize runs after recording): the answers
 * cached per stack are redone. */
Test(names, late_symbols_redo_cached_answers)
{
    const mt_record recs[] = {
        MOD(5, "/usr/bin/app", 0x500000, 0x600000),
        NODE(30, 0, 0x500010, MT_FRAME_NATIVE),
        NODE(31, 30, 0x500020, MT_FRAME_NATIVE),
    };
    mt_frames *f = frames_of(recs, sizeof recs / sizeof *recs);
    cr_expect_str_eq(mt_frames_first_user(f, 31, MT_NAME_SHORT), "app+0x20");
    int alloc = 1;
    cr_expect_str_eq(mt_frames_owner(f, 31, &alloc), "app+0x20");
    const mt_record late[] = {
        SYM(0x500020, "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(int, unsigned long, CUstream_st*)"),
        SYM(0x500010, "train_step(Model&)"),
    };
    for (size_t i = 0; i < 2; i++) cr_assert_eq(mt_frames_add(f, &late[i]), 1);
    cr_expect_str_eq(mt_frames_first_user(f, 31, MT_NAME_SHORT), "train_step");
    cr_expect_str_eq(mt_frames_owner(f, 31, &alloc), MT_OWNER_CACHING_ALLOCATOR);
    cr_expect(alloc);
    mt_frames_free(f);
}

/* A library's own thread (NCCL's proxy service allocating its buffers) has no frame a user wrote:
 * it starts in libc (clone3, start_thread) and runs NCCL's code. It is named by where it entered
 * the library, not by libc's start_thread (unsymbolized in distributions' libc: it read
 * "libc.so.6+0x9cb84" in every DDP trace); a thread a program started itself is named by its own
 * function, through libstdc++'s std::thread trampoline. */
Test(names, a_library_thread_is_named_by_its_entry_not_libc)
{
    const mt_record recs[] = {
        MOD(1, "/usr/lib/x86_64-linux-gnu/libc.so.6", 0x100000, 0x200000),
        MOD(2, "/opt/venv/nvidia/nccl/lib/libnccl.so.2", 0x200000, 0x300000),
        MOD(3, "/usr/lib/x86_64-linux-gnu/libcuda.so.1", 0x300000, 0x400000),
        MOD(4, "/usr/lib/x86_64-linux-gnu/libstdc++.so.6", 0x400000, 0x500000),
        MOD(5, "/usr/bin/app", 0x500000, 0x600000),
        NODE(40, 0, 0x100010, MT_FRAME_NATIVE),  /* libc: clone3 (no symbol) */
        NODE(41, 40, 0x100020, MT_FRAME_NATIVE), /* libc: start_thread (no symbol) */
        NODE(42, 41, 0x200010, MT_FRAME_NATIVE), /* ncclProxyService */
        NODE(43, 42, 0x200020, MT_FRAME_NATIVE), /* ncclCuMemAlloc */
        NODE(44, 43, 0x300010, MT_FRAME_NATIVE), /* cuMemCreate */
        NODE(45, 41, 0x400010, MT_FRAME_NATIVE), /* libstdc++: std::thread's trampoline */
        NODE(46, 45, 0x500010, MT_FRAME_NATIVE), /* the program's worker */
        NODE(47, 46, 0x300010, MT_FRAME_NATIVE), /* cuMemCreate */
        SYM(0x200010, "ncclProxyService(void*)"),
        SYM(0x200020, "ncclCuMemAlloc(void**, unsigned long long*, unsigned long)"),
        SYM(0x300010, "cuMemCreate"),
        SYM(0x500010, "worker(int)"),
    };
    mt_frames *f = frames_of(recs, sizeof recs / sizeof *recs);
    cr_expect_str_eq(mt_frames_first_user(f, 44, MT_NAME_SHORT), "ncclProxyService");
    const char *names[8];
    size_t n = mt_frames_path(f, 44, (mt_path_opts){.style = MT_NAME_SHORT, .filter = MT_FRAMES_USER},
                              names, 8);
    cr_assert_eq(n, 2);
    cr_expect_str_eq(names[0], "ncclProxyService");
    cr_expect_str_eq(names[1], "NCCL");
    cr_expect_str_eq(mt_frames_first_user(f, 47, MT_NAME_SHORT), "worker");
    n = mt_frames_path(f, 47, (mt_path_opts){.style = MT_NAME_SHORT, .filter = MT_FRAMES_USER},
                       names, 8);
    cr_assert_eq(n, 1);
    cr_expect_str_eq(names[0], "worker");
    mt_frames_free(f);
}
