// The python layer's userspace parts: CPython layouts against the installed headers, version
// detection on the installed interpreters, line tables against CPython's own co_lines(), and
// the function filter.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "store/sink.h"
#include "probe/elf_symbols.h"
#include "python/code_filter.h"
#include "python/cpython_build.h"
#include "python/debug_offsets.h"
#include "python/eval_frame_offset.h"
#include "python/layouts.h"
#include "python/line_table.h"
#include "python/python_decoder.h"
#include "util/error.h"

namespace eacgm {
namespace {

namespace fs = std::filesystem;

const std::string kPythonTests = EACGM_PYTHON_TEST_DIR;

std::string run_output(const std::string& command, int* status) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  *status = pclose(p);
  return out;
}

// Header sets on this machine: Debian's python3.11-dev and the pyenv builds.
struct HeaderSet {
  int minor;
  std::string include;  // the folder holding Python.h and internal/
};

std::vector<HeaderSet> header_sets(int minor) {
  std::vector<HeaderSet> out;
  std::string name = "python3." + std::to_string(minor);
  if (fs::exists("/usr/include/" + name + "/internal/pycore_interp.h"))
    out.push_back({minor, "/usr/include/" + name});
  std::error_code ec;
  for (const auto& v : fs::directory_iterator("/root/.pyenv/versions", ec)) {
    fs::path inc = v.path() / "include" / name;
    if (fs::exists(inc / "internal" / "pycore_interp.h")) out.push_back({minor, inc.string()});
  }
  return out;
}

std::map<std::string, uint64_t> layout_fields(const eacgm_py_layout& l) {
  std::map<std::string, uint64_t> m = {
      {"runtime_interp_main", l.runtime_interp_main},
      {"interp_threads_head", l.interp_threads_head},
      {"interp_eval_frame", l.interp_eval_frame},
      {"tstate_next", l.tstate_next},
      {"tstate_interp", l.tstate_interp},
      {"tstate_thread_id", l.tstate_thread_id},
      {"tstate_frame", l.tstate_frame},
      {"frame_back", l.frame_back},
      {"frame_code", l.frame_code},
      {"frame_instr", l.frame_instr},
      {"code_name", l.code_name},
      {"code_filename", l.code_filename},
      {"code_firstlineno", l.code_firstlineno},
      {"code_linetable", l.code_linetable},
      {"bytes_size", l.bytes_size},
      {"bytes_data", l.bytes_data},
      {"unicode_state", l.unicode_state},
      {"unicode_length", l.unicode_length},
      {"unicode_ascii_data", l.unicode_ascii_data},
      {"unicode_compact_data", l.unicode_compact_data},
      {"object_type", l.object_type}};
  if (l.version >= 311) m["code_instructions"] = l.code_instructions;
  if (l.version == 311 || l.version == 312) m["cframe_current_frame"] = l.cframe_current_frame;
  if (l.version >= 312) m["frame_owner"] = l.frame_owner;
  return m;
}

class PythonLayouts : public ::testing::TestWithParam<int> {};

TEST_P(PythonLayouts, MatchOffsetofInEveryInstalledHeaderSet) {
  int minor = GetParam();
  auto layout = cpython_layout(minor);
  ASSERT_TRUE(layout.has_value());
  auto sets = header_sets(minor);
  if (sets.empty())
    GTEST_SKIP() << "no CPython 3." << minor << " internal headers here (Debian python3." << minor
                 << "-dev or a pyenv build); the 3." << minor << " layout is unchecked";
  fs::path dir = fs::temp_directory_path() / ("eacgm-layout-3." + std::to_string(minor));
  fs::create_directories(dir);
  for (const auto& set : sets) {
    SCOPED_TRACE(set.include);
    std::string exe = (dir / "offsets").string();
    int status = 0;
    std::string log = run_output("cc -I" + set.include + " -I" + set.include + "/internal " +
                                     kPythonTests + "/cpython_offsets.c -o " + exe + " 2>&1",
                                 &status);
    ASSERT_EQ(status, 0) << "cannot compile the offsetof program: " << log;
    std::string out = run_output(exe, &status);
    ASSERT_EQ(status, 0);
    std::map<std::string, uint64_t> from_headers;
    std::istringstream in(out);
    std::string name;
    uint64_t value;
    while (in >> name >> value) from_headers[name] = value;
    EXPECT_EQ(layout_fields(*layout), from_headers);
  }
}

INSTANTIATE_TEST_SUITE_P(Versions, PythonLayouts, ::testing::Values(10, 11, 12, 13));

TEST(PythonLayouts, OnlyTheSupportedVersions) {
  EXPECT_FALSE(cpython_layout(9).has_value());
  EXPECT_TRUE(cpython_layout(13).has_value());
  EXPECT_FALSE(cpython_layout(14).has_value());
  EXPECT_STREQ(supported_cpython_versions(), "3.10, 3.11, 3.12, 3.13");
}

// The BPF side reads a frame's fields, and a code object's name and first line, in one read
// each over these spans: every field must lie inside, and every supported build fits.
TEST(PythonLayouts, ReadSpansCoverTheirFields) {
  for (int minor : {10, 11, 12, 13}) {
    SCOPED_TRACE(minor);
    eacgm_py_layout l = *cpython_layout(minor);
    set_read_spans(l);
    ASSERT_GT(l.frame_span_len, 0u);
    ASSERT_LE(l.frame_span_len, uint32_t(EACGM_PY_READ_SPAN));
    auto inside = [](uint32_t lo, uint32_t len, uint32_t off, uint32_t size) {
      return off >= lo && off + size <= lo + len;
    };
    EXPECT_TRUE(inside(l.frame_span_lo, l.frame_span_len, l.frame_back, 8));
    EXPECT_TRUE(inside(l.frame_span_lo, l.frame_span_len, l.frame_code, 8));
    EXPECT_TRUE(inside(l.frame_span_lo, l.frame_span_len, l.frame_instr, minor == 10 ? 4 : 8));
    if (l.frame_owner) EXPECT_TRUE(inside(l.frame_span_lo, l.frame_span_len, l.frame_owner, 1));
    ASSERT_GT(l.code_span_len, 0u);
    EXPECT_TRUE(inside(l.code_span_lo, l.code_span_len, l.code_name, 8));
    EXPECT_TRUE(inside(l.code_span_lo, l.code_span_len, l.code_firstlineno, 4));
    if (minor == 10) {
      EXPECT_EQ(l.tstate_span_len, 0u);  // 160 bytes apart
    } else {
      ASSERT_GT(l.tstate_span_len, 0u);
      EXPECT_TRUE(inside(l.tstate_span_lo, l.tstate_span_len, l.tstate_thread_id, 8));
      EXPECT_TRUE(inside(l.tstate_span_lo, l.tstate_span_len, l.tstate_frame, 8));
    }
  }
  // fields too far apart: read one by one
  eacgm_py_layout far = *cpython_layout(11);
  far.code_name = far.code_firstlineno + 200;
  set_read_spans(far);
  EXPECT_EQ(far.code_span_len, 0u);
}

std::string pyenv_lib(const std::string& version) {
  std::string minor = version.substr(0, version.rfind('.'));
  return "/root/.pyenv/versions/" + version + "/lib/libpython" + minor + ".so.1.0";
}

TEST(CPythonBuildDetection, DebianPython311ByItsPyVersion) {
  if (!fs::exists("/usr/bin/python3.11")) GTEST_SKIP() << "/usr/bin/python3.11 is not installed";
  auto b = inspect_cpython("/usr/bin/python3.11");
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->major, 3);
  EXPECT_EQ(b->minor, 11);
  EXPECT_EQ(b->version_source, "Py_Version");
  EXPECT_TRUE(b->layout.has_value());
  EXPECT_NE(b->runtime_vaddr, 0u);
  EXPECT_EQ(b->layout->runtime_from_eval, int64_t(b->runtime_vaddr) - int64_t(b->eval_vaddr));
}

TEST(CPythonBuildDetection, PyenvBuildsSupportedOrNot) {
  struct Case {
    std::string version;
    int minor;
    const char* source;
    bool supported;
  };
  int seen = 0;
  for (const Case& c : {Case{"3.10.13", 10, "file name", true}, Case{"3.12.1", 12, "Py_Version", true},
                        Case{"3.13.0", 13, "Py_Version", true},
                        Case{"3.9.18", 9, "file name", false}}) {
    std::string lib = pyenv_lib(c.version);
    if (!fs::exists(lib)) continue;
    ++seen;
    SCOPED_TRACE(lib);
    auto b = inspect_cpython(lib);
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ(b->minor, c.minor);
    EXPECT_EQ(b->version_source, c.source);
    EXPECT_EQ(b->layout.has_value(), c.supported);
    if (!c.supported)
      EXPECT_EQ(b->unsupported_message(),
                "layer python: " + lib + " is CPython " + b->version() +
                    ", which eacgm cannot read (supported: 3.10, 3.11, 3.12, 3.13); its Python calls "
                    "and stacks are not traced (run the job with a supported interpreter)");
  }
  if (seen == 0) GTEST_SKIP() << "no pyenv CPython builds under /root/.pyenv/versions";
}

// 3.13 publishes its offsets in _PyRuntime.debug_offsets; read from the file, they must agree
// with the built-in layout that offsetof checks against the headers.
TEST(CPythonDebugOffsets, Pyenv313PublishesTheBuiltInLayout) {
  std::string lib = pyenv_lib("3.13.0");
  if (!fs::exists(lib)) GTEST_SKIP() << lib << " is not installed: 3.13's published offsets are unchecked";
  auto b = inspect_cpython(lib);
  ASSERT_TRUE(b.has_value());
  ASSERT_TRUE(b->layout.has_value());
  EXPECT_EQ(b->layout_source, "_Py_DebugOffsets");
  EXPECT_TRUE(b->layout_notes.empty());
  EXPECT_FALSE(b->free_threaded);
  ElfSymbols elf = ElfSymbols::load(lib);
  uint64_t code_type = 0;
  for (const ElfSymbol& s : elf.symbols())
    if (s.name == "PyCode_Type" && s.value) code_type = s.value;
  ASSERT_NE(code_type, 0u);
  EXPECT_EQ(b->layout->code_type_from_runtime, int64_t(code_type) - int64_t(b->runtime_vaddr));
  auto published = read_cpython_debug_offsets(lib, *elf.file_offset_of(b->runtime_vaddr), 13);
  ASSERT_TRUE(published.has_value());
  EXPECT_EQ(published->version_hex, 0x030d00f0u);
  eacgm_py_layout built_in = *cpython_layout(13);
  EXPECT_EQ(apply_cpython_debug_offsets(*published, built_in), std::vector<std::string>{});
  EXPECT_EQ(layout_fields(built_in), layout_fields(*b->layout));
  EXPECT_EQ(b->layout->interp_eval_frame, 8472u);
  // another version's runtime holds no 3.13 offsets
  EXPECT_FALSE(read_cpython_debug_offsets(lib, *elf.file_offset_of(b->runtime_vaddr), 14));
}

// eval_frame is not published; read from the code of _PyInterpreterState_SetEvalFrameFunc, it
// must agree with the built-in layouts (which offsetof checks against the headers) in every
// installed build. (Debian 13's 3.13.5, whose interpreter state is not 3.13.0's, gives 8472 too:
// scripts/release_foreign.sh's root has it.)
TEST(CPythonEvalFrame, TheSettersCodeGivesTheBuiltInOffset) {
  int seen = 0;
  for (const auto& [path, minor] : std::vector<std::pair<std::string, int>>{
           {"/usr/bin/python3.11", 11},
           {pyenv_lib("3.10.13"), 10},
           {pyenv_lib("3.11.7"), 11},
           {pyenv_lib("3.12.1"), 12},
           {pyenv_lib("3.13.0"), 13},
           {"/var/tmp/eacgm-trixie/usr/bin/python3.13", 13}}) {
    if (!fs::exists(path)) continue;
    ++seen;
    SCOPED_TRACE(path);
    auto offset = eval_frame_offset_from_code(ElfSymbols::load(path));
    ASSERT_TRUE(offset.has_value());
    EXPECT_EQ(*offset, cpython_layout(minor)->interp_eval_frame);
  }
  if (seen == 0) GTEST_SKIP() << "no CPython 3.10-3.13 build installed";
  // a library without the function: none
  EXPECT_FALSE(eval_frame_offset_from_code(ElfSymbols::load("/proc/self/exe")).has_value());
}

// Bytes that are not 3.13's debug offsets are not believed; an unknown interpreter state costs
// the hook (its offset is not published), not the layout.
TEST(CPythonDebugOffsets, CookieVersionAndInterpreterStateAreChecked) {
  fs::path file = fs::temp_directory_path() / "eacgm-debug-offsets.bin";
  auto write = [&](const char* cookie, uint64_t version, uint64_t free_threaded) {
    std::vector<uint64_t> words(80, 0);
    std::memcpy(words.data(), cookie, 8);
    words[1] = version;
    words[2] = free_threaded;
    words[6] = 190000;  // interp size: not 3.13.0's
    words[9] = 7000;    // threads.head
    std::ofstream(file, std::ios::binary)
        .write(reinterpret_cast<const char*>(words.data()), std::streamsize(words.size() * 8));
  };
  write("xdebugpy", 0x030d05f0, 0);
  auto d = read_cpython_debug_offsets(file.string(), 0, 13);
  ASSERT_TRUE(d.has_value());
  EXPECT_FALSE(d->free_threaded);
  EXPECT_EQ(d->interp_threads_head, 7000u);
  eacgm_py_layout l = *cpython_layout(13);
  auto differed = apply_cpython_debug_offsets(*d, l);
  EXPECT_NE(std::find(differed.begin(), differed.end(), "interp_eval_frame"), differed.end());
  EXPECT_EQ(l.interp_eval_frame, 0u);
  EXPECT_EQ(l.interp_threads_head, 7000u);
  write("xdebugpy", 0x030d00f0, 1);
  EXPECT_TRUE(read_cpython_debug_offsets(file.string(), 0, 13)->free_threaded);
  write("xdebugpz", 0x030d00f0, 0);
  EXPECT_FALSE(read_cpython_debug_offsets(file.string(), 0, 13).has_value());
  write("xdebugpy", 0x030c00f0, 0);  // says 3.12
  EXPECT_FALSE(read_cpython_debug_offsets(file.string(), 0, 13).has_value());
  EXPECT_FALSE(read_cpython_debug_offsets(file.string(), 1 << 20, 13).has_value());  // past the end
  fs::remove(file);
}

TEST(CPythonBuildDetection, NamesAndNonPythonFiles) {
  EXPECT_EQ(cpython_minor_from_name("/usr/lib/libpython3.12.so.1.0"), 12);
  EXPECT_EQ(cpython_minor_from_name("/usr/bin/python3.10"), 10);
  EXPECT_EQ(cpython_minor_from_name("/usr/bin/python3.11d"), 11);
  EXPECT_EQ(cpython_minor_from_name("/usr/lib/libpython3.so"), -1);  // the stable-ABI stub
  EXPECT_EQ(cpython_minor_from_name("/usr/bin/python"), -1);
  EXPECT_EQ(cpython_minor_from_name("/usr/lib/libcudart.so.13"), -1);
  EXPECT_FALSE(inspect_cpython("/bin/true").has_value());
  EXPECT_FALSE(inspect_cpython("/nonexistent/python3.11").has_value());
}

std::vector<uint8_t> from_hex(const std::string& hex) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(uint8_t(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

class PythonLineTables : public ::testing::TestWithParam<std::string> {};

TEST_P(PythonLineTables, AgreeWithCoLinesAtEveryInstruction) {
  const std::string& python = GetParam();
  if (!fs::exists(python)) GTEST_SKIP() << python << " is not installed";
  int status = 0;
  std::string out = run_output(python + " " + kPythonTests + "/dump_linetables.py", &status);
  ASSERT_EQ(status, 0) << out;
  std::istringstream in(out);
  int functions = 0;
  int minor, first;
  std::string hex;
  while (in >> minor >> first >> hex) {
    ++functions;
    std::vector<uint8_t> table = from_hex(hex);
    std::string start;
    int checked = 0;
    while (in >> start && start != "end") {
      int end, line;
      in >> end >> line;
      for (int offset = std::stoi(start); offset < end; offset += 2, ++checked)
        ASSERT_EQ(cpython_line_of(minor, table, first, uint32_t(offset / 2)), line)
            << "function " << functions << " at byte offset " << offset;
    }
    EXPECT_GT(checked, 3);
  }
  EXPECT_EQ(functions, 3);
}

INSTANTIATE_TEST_SUITE_P(Interpreters, PythonLineTables,
                         ::testing::Values("/usr/bin/python3.11",
                                           "/root/.pyenv/versions/3.10.13/bin/python3.10",
                                           "/root/.pyenv/versions/3.12.1/bin/python3.12",
                                           "/root/.pyenv/versions/3.13.0/bin/python3.13"));

TEST(PythonLineTables, UnknownInstructionAndTruncatedTable) {
  std::vector<uint8_t> table = {0x08, 0x01, 0x04, 0x01};  // 3.10: 8 bytes +1 line, 4 bytes +1
  EXPECT_EQ(cpython_line_of(10, table, 5, 0), 6);
  EXPECT_EQ(cpython_line_of(10, table, 5, 4), 7);
  EXPECT_EQ(cpython_line_of(10, table, 5, 6), -1);   // past the table
  EXPECT_EQ(cpython_line_of(10, table, 5, ~0u), -1);  // a frame that has not started
}

// A line table is read from the traced process and may say anything (found by fuzz_python):
// lines that would pass INT_MAX (undefined behaviour before) or fall below 0 are unknown.
TEST(PythonLineTables, ALineNoSourceCanHaveIsUnknown) {
  std::vector<uint8_t> t310 = {0x02, 0x7f, 0x02, 0x7f};  // 3.10: 2 bytes +127 lines, twice
  EXPECT_EQ(cpython_line_of(10, t310, 10, 1), 264);
  EXPECT_EQ(cpython_line_of(10, t310, INT_MAX - 100, 0), -1);
  EXPECT_EQ(cpython_line_of(10, t310, INT_MAX - 200, 1), -1);
  std::vector<uint8_t> t311 = {0xe8, 21};  // 3.11: code 13 (no column), 1 unit, line -10
  EXPECT_EQ(cpython_line_of(11, t311, 12, 0), 2);
  EXPECT_EQ(cpython_line_of(11, t311, 5, 0), -1);
}

// Text the BPF side copied from a code object is made valid UTF-8 whatever it held: bytes
// >= 0x80 in an ASCII string (a torn read) and lone surrogates in a 2-byte string (CPython's
// str may hold them) become U+FFFD; before, they reached the recording as invalid UTF-8, which
// `report --json` and the exports could not write (found by fuzz_python).
TEST(PythonDecoder, NamesAreValidUtf8WhateverTheProcessHeld) {
  struct Rows final : Sink {
    std::vector<std::string> names, files;
    void add(const PythonCallRow& r) override {
      names.emplace_back(r.name);
      files.emplace_back(r.file);
    }
  } rows;
  PythonDecoder decoder(rows, PythonFilter("*"), [](const eacgm_py_code_key&, uint32_t) {});
  eacgm_py_code_event code{};
  code.kind = EACGM_REC_PY_CODE;
  code.version = 311;
  code.key = {0x1000, 0x2000, 7, 1};
  code.name_kind = 0;
  std::memcpy(code.name, "f\xe9" "e", 3);
  code.name_bytes = 3;
  code.file_kind = 2;
  const uint16_t file[] = {'/', 'a', 0xd800, '.', 'p', 'y'};
  std::memcpy(code.file, file, sizeof file);
  code.file_bytes = sizeof file;
  ASSERT_TRUE(decoder.on_record(code.kind, &code, sizeof code));
  eacgm_py_call_event call{};
  call.kind = EACGM_REC_PY_CALL;
  call.ts_ns = 100, call.dur_ns = 10, call.pid = 7, call.tid = 7;
  call.code = 0x1000, call.name_obj = 0x2000, call.firstlineno = 1;
  ASSERT_TRUE(decoder.on_record(call.kind, &call, sizeof call));
  ASSERT_EQ(rows.names.size(), 1u);
  EXPECT_NE(rows.names[0].find("f\xef\xbf\xbd" "e"), std::string::npos) << rows.names[0];
  EXPECT_EQ(rows.files[0], "/a\xef\xbf\xbd.py");
}

// A call's Python stack is read at the entry of the outermost traced call of its thread; the
// calls inside it share that stack (their py_stack_ts names it) and the outermost one takes it
// when it returns, last. Samples taken meanwhile bring and take their own stacks.
TEST(PythonDecoder, CallsInsideAnotherShareItsStackWhileSamplesComeAndGo) {
  Sink none;
  PythonDecoder decoder(none, PythonFilter("*"), [](const eacgm_py_code_key&, uint32_t) {});
  auto stack = [&](uint64_t ts, uint64_t code) {
    eacgm_py_stack_event s{};
    s.kind = EACGM_REC_PY_STACK;
    s.pid = 7, s.tid = 8, s.depth = 1, s.call_ts = ts;
    s.frames[0] = {code, 0x2000, 1, 0};
    ASSERT_TRUE(decoder.on_record(s.kind, &s, sizeof s));
  };
  stack(100, 0x1000);  // aten::linear's entry
  stack(150, 0x5000);  // a CPU sample inside it, elsewhere in Python (another thread state)
  int64_t sample = decoder.take_stack(7, 8, 150);
  EXPECT_GT(sample, 0);
  int64_t nested = decoder.stack_of_call(7, 8, 120, 100);  // aten::addmm inside it
  EXPECT_GT(nested, 0);
  EXPECT_NE(nested, sample);
  EXPECT_EQ(decoder.stack_of_call(7, 8, 130, 100), nested);  // and another
  EXPECT_EQ(decoder.stack_of_call(7, 8, 100, 100), nested);  // aten::linear returns: taken
  // the thread's next call whose frames were the same refers to it (PY_STACK_REUSED)
  EXPECT_EQ(decoder.stack_of_call(7, 8, 140, 100), nested);
  EXPECT_EQ(decoder.stack_of_call(7, 8, 200, 0), 0);  // no stack read
  stack(300, 0x6000);  // a call elsewhere reads its own; the two alternate
  int64_t other = decoder.stack_of_call(7, 8, 300, 300);
  EXPECT_GT(other, 0);
  EXPECT_NE(other, nested);
  EXPECT_EQ(decoder.stack_of_call(7, 8, 310, 100), nested);
  EXPECT_EQ(decoder.stack_of_call(7, 8, 320, 300), other);
  // the least recently used goes first: 7 more stacks of calls keep 300 (used last) and drop
  // 100, as the BPF side's fewer slots, in the same order, dropped it before
  for (uint64_t ts = 400; ts < 470; ts += 10) {
    stack(ts, 0x7000 + ts);
    EXPECT_GT(decoder.stack_of_call(7, 8, ts, ts), 0);
  }
  EXPECT_EQ(decoder.stack_of_call(7, 8, 480, 300), other);
  EXPECT_EQ(decoder.stack_of_call(7, 8, 490, 100), 0);
  EXPECT_EQ(decoder.stack_of_call(7, 9, 500, 300), 0);  // another thread's
  EXPECT_EQ(decoder.take_stack(7, 9, 100), 0);               // another thread's
  // stacks whose records never came (a full ring) do not pile up: the oldest go
  for (uint64_t ts = 1000; ts < 1020; ++ts) stack(ts, 0x1000);
  EXPECT_EQ(decoder.take_stack(7, 8, 1000), 0);
  EXPECT_GT(decoder.take_stack(7, 8, 1019), 0);
}

// A stack record whose raw frames came before is not decoded again (a training's stacks repeat
// every step), yet what its frames say may have changed since: a code object named after its
// frame was decoded as "<code object 0x...>", a key named again for another function, a
// process gone whose addresses a new one reuses.
TEST(PythonDecoder, RepeatedStacksKeepTheirIdUntilTheirCodeIsNamedAgain) {
  struct Rows final : Sink {
    std::map<int64_t, std::string> names;
    void add(const PythonStackFrameRow& r) override { names[r.id] = std::string(r.name); }
  } rows;
  PythonDecoder decoder(rows, PythonFilter("*"), [](const eacgm_py_code_key&, uint32_t) {});
  auto name = [&](const char* what) {
    eacgm_py_code_event code{};
    code.kind = EACGM_REC_PY_CODE;
    code.version = 311;
    code.key = {0x1000, 0x2000, 7, 1};
    code.name_bytes = uint32_t(strlen(what));
    std::memcpy(code.name, what, code.name_bytes);
    code.file_bytes = 5;
    std::memcpy(code.file, "/a.py", 5);
    ASSERT_TRUE(decoder.on_record(code.kind, &code, sizeof code));
  };
  uint64_t ts = 100;
  auto stack = [&](uint32_t pid) {
    eacgm_py_stack_event s{};
    s.kind = EACGM_REC_PY_STACK;
    s.pid = pid, s.tid = pid, s.depth = 1, s.call_ts = ++ts;
    s.frames[0] = {0x1000, 0x2000, 1, 0};
    EXPECT_TRUE(decoder.on_record(s.kind, &s, sizeof s));
    return decoder.take_stack(pid, pid, ts);
  };
  int64_t unnamed = stack(7);
  ASSERT_GT(unnamed, 0);
  EXPECT_EQ(stack(7), unnamed);
  EXPECT_EQ(rows.names[unnamed].rfind("<code object", 0), 0u) << rows.names[unnamed];
  name("step");
  int64_t step = stack(7);
  EXPECT_NE(step, unnamed);
  EXPECT_EQ(rows.names[step], "a.step");
  EXPECT_EQ(stack(7), step);
  name("other");  // the same key, another function now
  int64_t other = stack(7);
  EXPECT_EQ(rows.names[other], "a.other");
  EXPECT_EQ(decoder.stats().stacks, 3u);
  // the same frames in another process are its own (its code objects are not named here)
  int64_t elsewhere = stack(9);
  EXPECT_NE(elsewhere, other);
  decoder.forget(7);  // the process exits: its code objects and stacks go
  EXPECT_EQ(stack(7), unnamed);  // decoded again: no name now, the text of the first
}

// python_calls' depth counts the thread's recorded calls around a call. A call whose code's
// verdict was still pending when it entered (the first calls of each function, while the CODE
// record waits for userspace: longer on a busy machine) is counted in the BPF side's depth of
// the calls inside it; where the filter then rejects it, its own record is dropped and the
// decoder takes it out of theirs. (Session 32's loaded loop: Linear.forward two below
// Block.forward, past a pending nn.Module._call_impl, in 4 of 40 calls.)
TEST(PythonDecoder, ACallSentWhilePendingAndThenSkippedIsNotInTheDepthOfThoseInside) {
  struct Rows final : Sink {
    std::vector<std::pair<std::string, uint32_t>> calls;  // name, depth
    void add(const PythonCallRow& r) override { calls.emplace_back(r.name, r.depth); }
  } rows;
  PythonDecoder decoder(rows, PythonFilter("*,-*._call_impl"),
                        [](const eacgm_py_code_key&, uint32_t) {});
  auto name = [&](uint64_t code, const char* qualname) {
    eacgm_py_code_event c{};
    c.kind = EACGM_REC_PY_CODE;
    c.version = 311;
    c.key = {code, code + 1, 7, 1};
    std::memcpy(c.name, qualname, strlen(qualname));
    c.name_bytes = uint16_t(strlen(qualname));
    std::memcpy(c.file, "/m.py", 5);
    c.file_bytes = 5;
    ASSERT_TRUE(decoder.on_record(c.kind, &c, sizeof c));
  };
  auto pending = [&](uint64_t code, uint32_t depth, uint64_t ts, uint32_t tid = 8) {
    eacgm_py_pending_event p{};
    p.kind = EACGM_REC_PY_PENDING;
    p.depth = depth, p.pid = 7, p.tid = tid, p.ts_ns = ts;
    p.key = {code, code + 1, 7, 1};
    ASSERT_TRUE(decoder.on_record(p.kind, &p, sizeof p));
  };
  auto ret = [&](uint64_t code, uint32_t depth, uint64_t ts, uint64_t end, uint32_t tid = 8) {
    eacgm_py_call_event c{};
    c.kind = EACGM_REC_PY_CALL;
    c.depth = depth, c.ts_ns = ts, c.dur_ns = end - ts, c.pid = 7, c.tid = tid;
    c.code = code, c.name_obj = code + 1, c.firstlineno = 1;
    ASSERT_TRUE(decoder.on_record(c.kind, &c, sizeof c));
  };
  // Block.forward -> _call_impl -> Linear.forward, all three first calls (pending)
  name(0x100, "Block.forward");
  pending(0x100, 0, 10);
  name(0x200, "Module._call_impl");
  pending(0x200, 1, 20);
  name(0x300, "Linear.forward");
  pending(0x300, 2, 30);
  ret(0x300, 2, 30, 40);  // Linear.forward: one below Block.forward among recorded calls
  ret(0x200, 1, 20, 45);  // dropped
  pending(0x200, 1, 50);  // _call_impl again, its verdict still on its way to the BPF side
  ret(0x300, 2, 60, 70);  // a second Linear.forward (its own verdict there: no pending record)
  ret(0x200, 1, 50, 80);  // dropped
  // another thread, meanwhile: its depths are its own
  ret(0x300, 0, 55, 56, 9);
  ret(0x100, 0, 10, 90);
  // after: no pending call open, depths as sent
  ret(0x300, 1, 100, 110);
  EXPECT_EQ(rows.calls, (std::vector<std::pair<std::string, uint32_t>>{
                            {"m.Linear.forward", 1},
                            {"m.Linear.forward", 1},
                            {"m.Linear.forward", 0},
                            {"m.Block.forward", 0},
                            {"m.Linear.forward", 1}}));
  EXPECT_EQ(decoder.stats().filtered, 2u);
}

TEST(PythonDecoder, NamePrintIsFnv1aOfTheFirst32CharactersFolded) {
  // FNV-1a 32 of "a" is 0xe40c292c; folded: 0xe40c ^ 0x292c
  EXPECT_EQ(python_name_print("a"), 0xe40cu ^ 0x292cu);
  EXPECT_NE(python_name_print("fn_1"), python_name_print("fn_2"));
  EXPECT_EQ(python_name_print(std::string_view("fn_1\0junk", 9)), python_name_print("fn_1"));
  std::string long_name(32, 'x');
  EXPECT_EQ(python_name_print(long_name + "tail"), python_name_print(long_name));
  EXPECT_LE(python_name_print(long_name), 0xffffu);
}

TEST(PythonFilter, ModulesFromPaths) {
  EXPECT_EQ(python_module_of("/usr/lib/python3/dist-packages/torch/nn/modules/linear.py"),
            "torch.nn.modules.linear");
  EXPECT_EQ(python_module_of("/venv/lib/python3.12/site-packages/numpy/__init__.py"), "numpy");
  EXPECT_EQ(python_module_of("/usr/lib/python3.11/json/decoder.py"), "json.decoder");
  EXPECT_EQ(python_module_of("<frozen importlib._bootstrap>"), "importlib._bootstrap");
  EXPECT_EQ(python_module_of("/home/me/project/train.py"), "train");
  EXPECT_EQ(python_module_of("train.py"), "train");
}

// What --help suggests for a model's code: the user's and torch.nn's, without nn.Module's own
// plumbing around every module call.
TEST(PythonFilter, UsersCodeAndTorchNnWithoutThePlumbing) {
  PythonFilter f("user,torch.nn,-torch.nn.modules.module.Module._*");
  EXPECT_TRUE(f.wants("train.main", "/home/me/train.py"));
  EXPECT_TRUE(f.wants("torch.nn.modules.linear.Linear.forward",
                      "/usr/lib/python3/dist-packages/torch/nn/modules/linear.py"));
  EXPECT_FALSE(f.wants("torch.functional.norm", "/usr/lib/python3/dist-packages/torch/functional.py"));
  EXPECT_FALSE(f.wants("torch.nnx.f", "/usr/lib/python3/dist-packages/torch/nnx.py"));
  EXPECT_FALSE(f.wants("json.decoder.JSONDecoder.decode", "/usr/lib/python3.11/json/decoder.py"));
  EXPECT_FALSE(f.wants("importlib._bootstrap._find_and_load", "<frozen importlib._bootstrap>"));
  EXPECT_FALSE(f.wants("<string>.__new__", "<string>"));
  // nn.Module's plumbing is left out, the modules' forwards and public methods are not
  const char* module_py = "/usr/lib/python3/dist-packages/torch/nn/modules/module.py";
  EXPECT_FALSE(f.wants("torch.nn.modules.module.Module.__getattr__", module_py));
  EXPECT_FALSE(f.wants("torch.nn.modules.module.Module._call_impl", module_py));
  EXPECT_FALSE(
      f.wants("torch.nn.modules.module.Module.__setattr__.<locals>.remove_from", module_py));
  EXPECT_TRUE(f.wants("torch.nn.modules.module.Module.zero_grad", module_py));
  EXPECT_TRUE(f.wants("torch.nn.modules.linear.Linear.__init__",
                      "/usr/lib/python3/dist-packages/torch/nn/modules/linear.py"));
  EXPECT_TRUE(
      PythonFilter("user,torch.nn").wants("torch.nn.modules.module.Module._call_impl", module_py));
}

TEST(PythonFilter, ExclusionsWinOverEveryInclusion) {
  PythonFilter f("user,mypkg,-mypkg.internal,-*._*,-/home/me/vendored/");
  EXPECT_TRUE(f.wants("mypkg.api.run", "/x/site-packages/mypkg/api.py"));
  EXPECT_FALSE(f.wants("mypkg.internal.helper", "/x/site-packages/mypkg/internal.py"));
  EXPECT_FALSE(f.wants("mypkg.api._private", "/x/site-packages/mypkg/api.py"));
  EXPECT_TRUE(f.wants("train.main", "/home/me/train.py"));
  EXPECT_FALSE(f.wants("train._setup", "/home/me/train.py"));  // user code, but excluded
  EXPECT_FALSE(f.wants("lib.f", "/home/me/vendored/lib.py"));
  EXPECT_THROW(PythonFilter("-mypkg"), UsageError);  // leaves out, chooses nothing
  EXPECT_THROW(PythonFilter("torch.nn,-user"), UsageError);
}

TEST(PythonFilter, NamesGlobsAndPaths) {
  PythonFilter f("json.*Decoder.decode,mypkg,/srv/app/");
  EXPECT_TRUE(f.wants("json.decoder.JSONDecoder.decode", "/usr/lib/python3.11/json/decoder.py"));
  EXPECT_FALSE(f.wants("json.decoder.JSONDecoder.raw_decode", "/usr/lib/python3.11/json/decoder.py"));
  EXPECT_TRUE(f.wants("mypkg.sub.f", "/x/site-packages/mypkg/sub.py"));
  EXPECT_TRUE(f.wants("mypkg", "/x/site-packages/mypkg/__init__.py"));
  EXPECT_FALSE(f.wants("mypkg2.f", "/x/site-packages/mypkg2.py"));
  EXPECT_TRUE(f.wants("server.handle", "/srv/app/server.py"));
  EXPECT_FALSE(f.wants("train.main", "/home/me/train.py"));  // no "user" in this filter
  EXPECT_TRUE(PythonFilter("*").wants("importlib._bootstrap._find_and_load",
                                      "<frozen importlib._bootstrap>"));
  EXPECT_THROW(PythonFilter(","), UsageError);
}

}  // namespace
}  // namespace eacgm
