"""The binding drift check on small headers and bindings written like llama.h and llama_cpp.py."""

from __future__ import annotations

from builder.deliver.drift import check, parse_bindings, parse_header

GGML_H = """\
    typedef struct ggml_opt_result * ggml_opt_result_t;
    typedef bool (*ggml_abort_callback)(void * data);
    enum ggml_status { GGML_STATUS_SUCCESS = 0 };
"""

HEADER = """\
#ifdef LLAMA_SHARED
#    if defined(_WIN32) && !defined(__MINGW32__)
#        define LLAMA_API __declspec(dllexport)
#    else
#        define LLAMA_API __attribute__ ((visibility ("default")))
#    endif
#endif
    typedef int32_t llama_token;
    struct llama_batch { int32_t n_tokens; };

    // a comment with LLAMA_API void llama_fake(void); inside
    LLAMA_API void llama_free(struct llama_context * ctx);
    LLAMA_API llama_token llama_vocab_bos(const struct llama_vocab * vocab);
    LLAMA_API int32_t llama_decode(struct llama_context * ctx, struct llama_batch batch);
    LLAMA_API void llama_set_abort_callback(struct llama_context * ctx, ggml_abort_callback cb, void * data);
    LLAMA_API void llama_opt_epoch(struct llama_context * lctx, ggml_opt_result_t result, int64_t idata_split);
    DEPRECATED(LLAMA_API int32_t llama_old(void), "use llama_new");
    LLAMA_API int64_t llama_time_us(void);
"""

BINDINGS = """\
import ctypes
llama_context_p_ctypes = ctypes.c_void_p
llama_token = ctypes.c_int32
ggml_abort_callback = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p)

class llama_batch(ctypes.Structure):
    _fields_ = [("n_tokens", ctypes.c_int32)]

@ctypes_function("llama_free", [llama_context_p_ctypes], None)
def llama_free(ctx, /): ...

@ctypes_function("llama_vocab_bos", [ctypes.c_void_p], llama_token)
def llama_vocab_bos(vocab, /): ...

@ctypes_function("llama_decode", [llama_context_p_ctypes, llama_batch], ctypes.c_int32)
def llama_decode(ctx, batch, /): ...

@ctypes_function("llama_set_abort_callback", [llama_context_p_ctypes, ggml_abort_callback, ctypes.c_void_p], None)
def llama_set_abort_callback(ctx, cb, data, /): ...

@ctypes_function("llama_opt_epoch", [llama_context_p_ctypes, ctypes.c_void_p, ctypes.c_int64], None)
def llama_opt_epoch(lctx, result, idata_split, /): ...

@ctypes_function("llama_old", [], ctypes.c_int32)
def llama_old(): ...

@ctypes_function("llama_time_us", [], ctypes.c_int64)
def llama_time_us(): ...
"""


def test_the_header_and_the_bindings_agree_function_by_function() -> None:
    decls = parse_header(HEADER, [GGML_H])
    assert set(decls) == {"llama_free", "llama_vocab_bos", "llama_decode", "llama_set_abort_callback",
                          "llama_opt_epoch", "llama_old", "llama_time_us"}
    assert decls["llama_decode"].params == ("ptr", "struct llama_batch")
    assert decls["llama_vocab_bos"].ret == "i32"
    assert decls["llama_time_us"].params == ()
    py = parse_bindings(BINDINGS)
    assert py["llama_set_abort_callback"].params == ("ptr", "ptr", "ptr")
    assert py["llama_decode"].params == ("ptr", "struct llama_batch")
    # every function, compared: the parser reads both sides the same way
    assert check(HEADER, HEADER, BINDINGS, typedef_sources=[GGML_H], functions=sorted(decls)) == []


def test_unchanged_declarations_are_not_checked() -> None:
    bad = BINDINGS.replace('[ctypes.c_void_p], llama_token)', '[ctypes.c_void_p], ctypes.c_int64)')
    assert check(HEADER, HEADER, bad, typedef_sources=[GGML_H]) == []


def test_a_changed_return_type_is_reported() -> None:
    after = HEADER.replace("LLAMA_API void llama_opt_epoch", "LLAMA_API enum ggml_status llama_opt_epoch")
    found = check(HEADER, after, BINDINGS, typedef_sources=[GGML_H])
    assert [d.function for d in found] == ["llama_opt_epoch"]
    assert found[0].problem == ("returns enum ggml_status (i32) in the header, the bindings declare restype "
                                "None (void)")
    assert found[0].header.startswith("enum ggml_status llama_opt_epoch(struct llama_context * lctx,")
    assert found[0].bindings.startswith("llama_cpp.py:")


def test_changed_arguments_are_reported_and_renames_are_not() -> None:
    after = (HEADER
             .replace("int64_t idata_split)", "int32_t idata_split)")
             .replace("void * data);", "void * data, bool enable);")
             .replace("llama_free(struct llama_context * ctx)", "llama_free(struct llama_context * lctx)"))
    found = {d.function: d.problem for d in check(HEADER, after, BINDINGS, typedef_sources=[GGML_H])}
    assert found == {
        "llama_opt_epoch": "argument 3 is i32 in the header, i64 in the bindings",
        "llama_set_abort_callback": "takes 4 argument(s) in the header, the bindings declare 3",
    }


def test_a_removed_function_that_is_still_bound_is_reported() -> None:
    after = HEADER.replace("    LLAMA_API int64_t llama_time_us(void);\n", "")
    added = HEADER + "    LLAMA_API void llama_new_thing(void);\n"
    found = check(HEADER, after, BINDINGS, typedef_sources=[GGML_H])
    assert [(d.function, d.problem) for d in found] == [
        ("llama_time_us", "removed from the header, the bindings still bind it (import fails)")]
    # a function the series adds is new API the bindings do not call: nothing breaks
    assert check(HEADER, added, BINDINGS, typedef_sources=[GGML_H]) == []
