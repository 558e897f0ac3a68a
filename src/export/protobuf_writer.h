// A minimal protobuf wire-format encoder for writing schema-shaped messages without libprotobuf.
#pragma once
#include <bit>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace eacgm::proto {

enum class WireType : uint8_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2 };

inline void append_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

inline size_t varint_size(uint64_t value) {
  size_t size = 1;
  while (value >= 0x80) {
    value >>= 7;
    ++size;
  }
  return size;
}

inline void append_tag(std::string& out, uint32_t field, WireType type) {
  append_varint(out, (uint64_t{field} << 3) | static_cast<uint8_t>(type));
}

// Appends fields to one growing buffer. Nested messages are written in place and their length
// prefix is inserted when they end, so the output uses minimal varints (unlike protozero's
// fixed-width redundant lengths) at the cost of moving the nested bytes once per level; that is
// cheap for the small, shallow messages a trace is made of.
class ProtoWriter {
 public:
  // Ends the innermost open message when it goes out of scope.
  class [[nodiscard]] Nested {
   public:
    explicit Nested(ProtoWriter& writer) : writer_(writer) {}
    Nested(const Nested&) = delete;
    Nested& operator=(const Nested&) = delete;
    ~Nested() { writer_.end_message(); }

   private:
    ProtoWriter& writer_;
  };

  void add_varint(uint32_t field, uint64_t value) {
    append_tag(buf_, field, WireType::kVarint);
    append_varint(buf_, value);
  }
  // int32/int64 fields: negative values take all ten bytes, as the wire format specifies.
  void add_int(uint32_t field, int64_t value) { add_varint(field, static_cast<uint64_t>(value)); }
  void add_bool(uint32_t field, bool value) { add_varint(field, value ? 1 : 0); }

  void add_fixed64(uint32_t field, uint64_t value) {
    append_tag(buf_, field, WireType::kFixed64);
    for (int byte = 0; byte < 8; ++byte) {  // little-endian regardless of the host
      buf_.push_back(static_cast<char>(value >> (8 * byte)));
    }
  }
  void add_double(uint32_t field, double value) {
    add_fixed64(field, std::bit_cast<uint64_t>(value));
  }

  // string and bytes fields, and already-encoded messages.
  void add_bytes(uint32_t field, std::string_view bytes) {
    append_tag(buf_, field, WireType::kLengthDelimited);
    append_varint(buf_, bytes.size());
    buf_.append(bytes);
  }
  void add_string(uint32_t field, std::string_view text) { add_bytes(field, text); }

  // Fields encoded elsewhere (tags included), e.g. cached sub-messages.
  void add_raw(std::string_view encoded) { buf_.append(encoded); }

  void begin_message(uint32_t field) {
    append_tag(buf_, field, WireType::kLengthDelimited);
    open_.push_back(buf_.size());
  }
  void end_message() {
    assert(!open_.empty());
    const size_t start = open_.back();
    open_.pop_back();
    std::string length;
    append_varint(length, buf_.size() - start);
    buf_.insert(start, length);
  }
  // begin_message with the end tied to a scope: `auto packet = writer.message(1);`
  Nested message(uint32_t field) {
    begin_message(field);
    return Nested(*this);
  }

  std::string_view data() const { return buf_; }
  size_t size() const { return buf_.size(); }
  bool in_message() const { return !open_.empty(); }
  // Keeps the capacity so that a writer reused per chunk does not reallocate.
  void clear() {
    assert(open_.empty());
    buf_.clear();
  }

 private:
  std::string buf_;
  std::vector<size_t> open_;  // offsets where each open message's payload starts
};

}  // namespace eacgm::proto
