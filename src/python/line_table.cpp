// Two formats: 3.10's (byte-delta, line-delta) pairs (Objects/lnotab_notes.txt), and 3.11+'s
// location table (Objects/locations.md), whose entries start with a byte 1CCCCLLL: a code
// saying how the line changes and (L + 1) code units covered.
#include "python/line_table.h"

#include <climits>

namespace eacgm {
namespace {

// The table comes from the traced process's memory and may say anything: lines are summed in
// 64 bits (hundreds of deltas of +-2^31 cannot overflow them) and any sum that is no line
// number (negative, or beyond int) is unknown.
int line_or_unknown(int64_t line) { return line < 0 || line > INT_MAX ? -1 : int(line); }

int line_310(std::span<const uint8_t> t, int64_t line, uint32_t instr) {
  uint64_t byte_offset = uint64_t(instr) * 2, start = 0;
  for (size_t i = 0; i + 1 < t.size(); i += 2) {
    uint64_t end = start + t[i];
    int delta = int8_t(t[i + 1]);
    bool no_line = delta == -128;
    if (!no_line) line += delta;
    if (byte_offset >= start && byte_offset < end) return no_line ? -1 : line_or_unknown(line);
    start = end;
  }
  return -1;
}

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> t) : t_(t) {}
  bool done() const { return i_ >= t_.size(); }
  uint8_t byte() { return i_ < t_.size() ? t_[i_++] : 0; }
  uint32_t varint() {
    uint32_t b = byte(), v = b & 63, shift = 0;
    while ((b & 64) && !done() && shift < 30) {
      b = byte();
      shift += 6;
      v |= (b & 63) << shift;
    }
    return v;
  }
  int svarint() {
    uint32_t v = varint();
    return (v & 1) ? -int(v >> 1) : int(v >> 1);
  }
  size_t pos() const { return i_; }

 private:
  std::span<const uint8_t> t_;
  size_t i_ = 0;
};

int line_311(std::span<const uint8_t> t, int64_t line, uint32_t instr) {
  Reader r(t);
  uint64_t start = 0;
  while (!r.done()) {
    uint8_t first = r.byte();
    if (!(first & 0x80)) return -1;  // lost our place: a truncated or unexpected table
    int code = (first >> 3) & 15;
    uint64_t end = start + (first & 7) + 1;
    bool no_line = false;
    switch (code) {
      case 15: no_line = true; break;  // no location
      case 14:                        // long form: line delta, end line, columns
        line += r.svarint();
        r.varint(), r.varint(), r.varint();
        break;
      case 13: line += r.svarint(); break;  // no column
      case 10: case 11: case 12:            // one line: delta is code - 10, two column bytes
        line += code - 10;
        r.byte(), r.byte();
        break;
      default: r.byte(); break;  // short forms: same line, one column byte
    }
    if (instr >= start && instr < end) return no_line ? -1 : line_or_unknown(line);
    start = end;
  }
  return -1;
}

}  // namespace

int cpython_line_of(int minor, std::span<const uint8_t> table, int firstlineno, uint32_t instr) {
  if (instr == ~0u) return -1;
  if (minor == 10) return line_310(table, firstlineno, instr);
  if (minor >= 11) return line_311(table, firstlineno, instr);
  return -1;
}

}  // namespace eacgm
