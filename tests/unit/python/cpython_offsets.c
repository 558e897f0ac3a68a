/* Prints the offsets eacgm's CPython layouts (src/python/layouts.cpp) hold, computed by the
 * compiler from one CPython version's internal headers: "field offset" per line. Built and run
 * by test_python.cpp against each header set installed on the machine. */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#include "internal/pycore_runtime.h"
#include "internal/pycore_interp.h"
#if PY_MINOR_VERSION >= 11
#include "internal/pycore_frame.h"
#else
#include "frameobject.h"
#endif

#define P(name, expr) printf("%s %zu\n", name, (size_t)(expr))

int main(void)
{
	P("runtime_interp_main", offsetof(_PyRuntimeState, interpreters.main));
#if PY_MINOR_VERSION == 10
	P("interp_threads_head", offsetof(PyInterpreterState, tstate_head));
	P("tstate_thread_id", offsetof(PyThreadState, thread_id));
	P("tstate_frame", offsetof(PyThreadState, frame));
	P("frame_back", offsetof(PyFrameObject, f_back));
	P("frame_code", offsetof(PyFrameObject, f_code));
	P("frame_instr", offsetof(PyFrameObject, f_lasti));
	P("code_name", offsetof(PyCodeObject, co_name));
#else
	P("interp_threads_head", offsetof(PyInterpreterState, threads.head));
	P("tstate_thread_id", offsetof(PyThreadState, native_thread_id));
	P("frame_back", offsetof(_PyInterpreterFrame, previous));
	P("code_name", offsetof(PyCodeObject, co_qualname));
	P("code_instructions", offsetof(PyCodeObject, co_code_adaptive));
#endif
#if PY_MINOR_VERSION == 11 || PY_MINOR_VERSION == 12
	P("tstate_frame", offsetof(PyThreadState, cframe));
	P("cframe_current_frame", offsetof(_PyCFrame, current_frame));
	P("frame_code", offsetof(_PyInterpreterFrame, f_code));
	P("frame_instr", offsetof(_PyInterpreterFrame, prev_instr));
#endif
#if PY_MINOR_VERSION >= 12
	P("frame_owner", offsetof(_PyInterpreterFrame, owner));
#endif
#if PY_MINOR_VERSION >= 13
	/* no _PyCFrame; frames may run other things than code (f_executable), and say where they
	 * are with instr_ptr */
	P("tstate_frame", offsetof(PyThreadState, current_frame));
	P("frame_code", offsetof(_PyInterpreterFrame, f_executable));
	P("frame_instr", offsetof(_PyInterpreterFrame, instr_ptr));
#endif
	P("interp_eval_frame", offsetof(PyInterpreterState, eval_frame));
	P("object_type", offsetof(PyObject, ob_type));
	P("tstate_next", offsetof(PyThreadState, next));
	P("tstate_interp", offsetof(PyThreadState, interp));
	P("code_filename", offsetof(PyCodeObject, co_filename));
	P("code_firstlineno", offsetof(PyCodeObject, co_firstlineno));
	P("code_linetable", offsetof(PyCodeObject, co_linetable));
	P("bytes_size", offsetof(PyVarObject, ob_size));
	P("bytes_data", offsetof(PyBytesObject, ob_sval));
	P("unicode_state", offsetof(PyASCIIObject, state));
	P("unicode_length", offsetof(PyASCIIObject, length));
	P("unicode_ascii_data", sizeof(PyASCIIObject));
	P("unicode_compact_data", sizeof(PyCompactUnicodeObject));
	return 0;
}
