// JSON for everything mpx reads and writes: a strict bounded parser (safetensors headers) and text writers.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mpx::json {

struct Member;

/// A parsed JSON value. Numbers keep their literal text so integers wider than a double stay exact.
struct Value {
  enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
  bool b = false;
  std::string text;          ///< String: the decoded value; Number: the literal as written.
  std::vector<Value> items;  ///< Array elements.
  // A struct, not std::pair<std::string, Value>: a pair of the incomplete Value does not compile
  // with clang and libstdc++.
  std::vector<Member> members;  ///< Object members in document order; names are unique.

  /// The member called `name`, or nullptr (also when this is not an object).
  const Value* find(std::string_view name) const;
};
struct Member {
  std::string first;
  Value second;
};

/// Why a document was refused and where: `pos` is the byte offset into the parsed text.
struct ParseError {
  size_t pos;
  std::string what;
};

/// Parses one JSON document (RFC 8259) strictly: no trailing text, no duplicate object names,
/// nesting at most 64 deep and at most 1,000,000 values, so hostile input cannot exhaust the
/// stack or memory. Throws ParseError. The text must be valid UTF-8 (see invalid_utf8_at).
Value parse(const char* s, size_t n);

/// The offset of the first byte that breaks UTF-8 (overlong forms and surrogates included), or
/// std::string::npos when `s` is valid.
size_t invalid_utf8_at(const char* s, size_t n);

/// A JSON number as a non-negative integer that fits in int64 (sizes, offsets); false otherwise.
bool as_u63(const Value& v, uint64_t* out);

/// Appends `s` as a JSON string literal: quotes, backslashes and every control character escaped.
void append_string(std::string& out, std::string_view s);
/// `s` as a JSON string literal.
std::string quote(std::string_view s);
/// A number as JSON text: integers below 1e15 without a fraction, others with nine significant
/// digits (a float's round trip, which is what metrics hold), and null for NaN and infinities,
/// which JSON cannot hold.
std::string number(double v);

}  // namespace mpx::json
