// The python layer's records are copied by BPF out of the traced interpreter's memory: a code
// object's name, file and line table as that process held them (a torn read, a build eacgm does
// not know, or a hostile process can put any bytes there), and stacks of frames naming code
// objects by address. Whatever they hold, decoding must stay in bounds, name every row's code
// object with valid UTF-8 text, and never overflow (a line table may say anything).
//
// The input is a sequence of records, each: a selector byte (code / call / stack record, or a
// bare line-table lookup), then the record's bytes (zero-filled when the input ends). Keys
// (pid, code address, name object, first line) are folded into a few values so that calls and
// stacks meet the code objects named before them.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "events.h"
#include "store/sink.h"
#include "python/code_filter.h"
#include "python/line_table.h"
#include "python/python_decoder.h"
#include "util/error.h"

namespace {

// Well-formed UTF-8 (RFC 3629): no stray continuation bytes, overlong forms, surrogates or code
// points beyond U+10FFFF.
bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    auto c = uint8_t(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : c & (0x7f >> n);
    for (size_t k = 1; k < n; ++k) {
      if ((uint8_t(s[i + k]) >> 6) != 2) return false;
      cp = cp << 6 | (uint8_t(s[i + k]) & 0x3f);
    }
    static const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[n] || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) return false;
    i += n;
  }
  return true;
}

// Checks what the decoder writes.
class CheckingSink final : public eacgm::Sink {
 public:
  void add(const eacgm::PythonCallRow& r) override {
    if (!valid_utf8(r.name) || !valid_utf8(r.file)) std::abort();
  }
  void add(const eacgm::PythonStackFrameRow& r) override {
    if (!valid_utf8(r.name) || !valid_utf8(r.file)) std::abort();
  }
};

template <typename T>
T take(const uint8_t*& p, size_t& n) {
  T v{};
  size_t k = n < sizeof v ? n : sizeof v;
  std::memcpy(&v, p, k);
  p += k;
  n -= k;
  return v;
}

void fold(eacgm_py_code_key& k) {
  k.pid = 1 + k.pid % 2;
  k.code = 0x1000 + (k.code % 4) * 0x100;
  k.name_obj = 0x9000 + (k.name_obj % 4) * 0x100;
  k.firstlineno %= 4;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  CheckingSink sink;
  eacgm::PythonDecoder decoder(sink, eacgm::PythonFilter("*"), [](const eacgm_py_code_key&, uint32_t) {});
  const uint8_t* p = data;
  size_t n = size;
  for (int records = 0; n > 0 && records < 64; ++records) {
    switch (take<uint8_t>(p, n) % 4) {
      case 0: {
        auto e = take<eacgm_py_code_event>(p, n);
        e.kind = EACGM_REC_PY_CODE;
        fold(e.key);
        decoder.on_record(e.kind, &e, sizeof e);
        break;
      }
      case 1: {
        auto e = take<eacgm_py_call_event>(p, n);
        e.kind = EACGM_REC_PY_CALL;
        eacgm_py_code_key k{};
        k.pid = e.pid, k.code = e.code, k.name_obj = e.name_obj, k.firstlineno = e.firstlineno;
        fold(k);
        e.pid = k.pid, e.code = k.code, e.name_obj = k.name_obj, e.firstlineno = k.firstlineno;
        decoder.take_stack(e.pid, e.tid, e.ts_ns);
        decoder.on_record(e.kind, &e, sizeof e);
        break;
      }
      case 2: {
        auto e = take<eacgm_py_stack_event>(p, n);
        e.kind = EACGM_REC_PY_STACK;
        e.pid = 1 + e.pid % 2;
        for (auto& f : e.frames) {
          eacgm_py_code_key k{};
          k.pid = e.pid, k.code = f.code, k.name_obj = f.name_obj, k.firstlineno = f.firstlineno;
          fold(k);
          f.code = k.code, f.name_obj = k.name_obj, f.firstlineno = k.firstlineno;
        }
        decoder.on_record(e.kind, &e, sizeof e);
        break;
      }
      default: {
        // a line lookup in a table of any bytes, for any version the decoder may be handed
        int minor = 8 + take<uint8_t>(p, n) % 8;
        auto first = take<int32_t>(p, n);
        auto instr = take<uint32_t>(p, n);
        size_t len = take<uint8_t>(p, n);
        len = len < n ? len : n;
        eacgm::cpython_line_of(minor, {p, len}, first, instr);
        p += len;
        n -= len;
      }
    }
  }
  return 0;
}
