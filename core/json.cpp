// JSON parsing and writing shared by safetensors headers, metrics logs and benchmark reports.
#include "core/json.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <unordered_set>

namespace mpx::json {
namespace {

class Parser {
 public:
  Parser(const char* s, size_t n) : s_(s), n_(n) {}
  Value parse_document() {
    skip_ws();
    Value v = parse_value(0);
    skip_ws();
    if (i_ != n_) fail("unexpected trailing characters after the JSON value");
    return v;
  }

 private:
  static constexpr int kMaxDepth = 64;
  // Bounds the parse tree's memory for hostile input (a safetensors header needs ~10 values per tensor).
  static constexpr size_t kMaxValues = 1'000'000;
  size_t values_ = 0;
  const char* s_;
  size_t n_;
  size_t i_ = 0;

  [[noreturn]] void fail(const std::string& what) const { throw ParseError{i_, what}; }
  void skip_ws() {
    while (i_ < n_ && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool literal(const char* word) {
    const size_t len = std::strlen(word);
    if (n_ - i_ >= len && std::memcmp(s_ + i_, word, len) == 0) { i_ += len; return true; }
    return false;
  }
  Value parse_value(int depth) {
    if (depth > kMaxDepth) fail("nesting deeper than 64 levels");
    if (++values_ > kMaxValues) fail("more than 1000000 JSON values");
    if (i_ >= n_) fail("unexpected end of the text");
    Value v;
    const char c = s_[i_];
    if (c == '{') {
      v.kind = Value::Object;
      ++i_;
      skip_ws();
      if (i_ < n_ && s_[i_] == '}') { ++i_; return v; }
      std::unordered_set<std::string> seen;
      for (;;) {
        skip_ws();
        if (i_ >= n_ || s_[i_] != '"') fail("expected a string key");
        std::string key = parse_string();
        skip_ws();
        if (i_ >= n_ || s_[i_] != ':') fail("expected ':' after key \"" + key + "\"");
        ++i_;
        skip_ws();
        if (!seen.insert(key).second) fail("duplicate name \"" + key + "\" (each name may appear only once in an object)");
        Value child = parse_value(depth + 1);
        v.members.push_back({std::move(key), std::move(child)});
        skip_ws();
        if (i_ < n_ && s_[i_] == ',') { ++i_; continue; }
        if (i_ < n_ && s_[i_] == '}') { ++i_; return v; }
        fail("expected ',' or '}' in object");
      }
    }
    if (c == '[') {
      v.kind = Value::Array;
      ++i_;
      skip_ws();
      if (i_ < n_ && s_[i_] == ']') { ++i_; return v; }
      for (;;) {
        skip_ws();
        v.items.push_back(parse_value(depth + 1));
        skip_ws();
        if (i_ < n_ && s_[i_] == ',') { ++i_; continue; }
        if (i_ < n_ && s_[i_] == ']') { ++i_; return v; }
        fail("expected ',' or ']' in array");
      }
    }
    if (c == '"') { v.kind = Value::String; v.text = parse_string(); return v; }
    if (literal("true")) { v.kind = Value::Bool; v.b = true; return v; }
    if (literal("false")) { v.kind = Value::Bool; return v; }
    if (literal("null")) return v;
    if (c == '-' || (c >= '0' && c <= '9')) { v.kind = Value::Number; v.text = parse_number(); return v; }
    fail(std::string("unexpected character '") + (c >= 0x20 && c < 0x7f ? std::string(1, c) : "\\x" + hex2(c)) + "'");
  }
  static std::string hex2(char c) {
    static const char* d = "0123456789abcdef";
    const auto u = static_cast<unsigned char>(c);
    return {d[u >> 4], d[u & 15]};
  }
  std::string parse_number() {
    const size_t start = i_;
    auto digits = [&] {
      const size_t b = i_;
      while (i_ < n_ && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
      return i_ - b;
    };
    if (s_[i_] == '-') ++i_;
    if (i_ < n_ && s_[i_] == '0') ++i_;
    else if (digits() == 0) fail("invalid number");
    if (i_ < n_ && s_[i_] == '.') { ++i_; if (digits() == 0) fail("invalid number: digits expected after '.'"); }
    if (i_ < n_ && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < n_ && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (digits() == 0) fail("invalid number: digits expected in the exponent");
    }
    return std::string(s_ + start, i_ - start);
  }
  unsigned hex4() {
    if (n_ - i_ < 4) fail("truncated \\u escape");
    unsigned v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[i_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= c - '0';
      else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
      else fail("invalid hex digit in \\u escape");
    }
    return v;
  }
  static void put_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }
  std::string parse_string() {
    ++i_;  // opening quote
    std::string out;
    for (;;) {
      if (i_ >= n_) fail("unterminated string");
      const char c = s_[i_];
      if (c == '"') { ++i_; return out; }
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (c != '\\') { out += c; ++i_; continue; }
      ++i_;
      if (i_ >= n_) fail("unterminated escape");
      const char e = s_[i_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xd800 && cp < 0xdc00) {
            if (n_ - i_ < 6 || s_[i_] != '\\' || s_[i_ + 1] != 'u') fail("unpaired surrogate in \\u escape");
            i_ += 2;
            const unsigned lo = hex4();
            if (lo < 0xdc00 || lo >= 0xe000) fail("invalid low surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          } else if (cp >= 0xdc00 && cp < 0xe000) {
            fail("unpaired low surrogate in \\u escape");
          }
          put_utf8(out, cp);
          break;
        }
        default: --i_; fail(std::string("invalid escape '\\") + (e >= 0x20 && e < 0x7f ? std::string(1, e) : "?") + "'");
      }
    }
  }
};

}  // namespace

Value parse(const char* s, size_t n) { return Parser(s, n).parse_document(); }

const Value* Value::find(std::string_view name) const {
  for (const Member& m : members)
    if (m.first == name) return &m.second;
  return nullptr;
}

size_t invalid_utf8_at(const char* s, size_t n) {
  size_t i = 0;
  while (i < n) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len;
    unsigned cp;
    if (c < 0x80) { ++i; continue; }
    if ((c & 0xe0) == 0xc0) { len = 2; cp = c & 0x1f; }
    else if ((c & 0xf0) == 0xe0) { len = 3; cp = c & 0x0f; }
    else if ((c & 0xf8) == 0xf0) { len = 4; cp = c & 0x07; }
    else return i;
    if (n - i < len) return i;
    for (size_t k = 1; k < len; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xc0) != 0x80) return i;
      cp = (cp << 6) | (d & 0x3f);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are invalid.
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp < 0xe000))
      return i;
    i += len;
  }
  return std::string::npos;
}

bool as_u63(const Value& v, uint64_t* out) {
  if (v.kind != Value::Number || v.text.empty() || v.text[0] == '-') return false;
  if (v.text.find_first_not_of("0123456789") != std::string::npos) return false;  // fraction / exponent
  if (v.text.size() > 19) return false;
  uint64_t r = 0;
  for (char c : v.text) r = r * 10 + static_cast<uint64_t>(c - '0');
  if (r > static_cast<uint64_t>(INT64_MAX)) return false;
  *out = r;
  return true;
}

void append_string(std::string& out, std::string_view s) {
  out += '"';
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"') out += "\\\"";
    else if (c == '\\') out += "\\\\";
    else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  out += '"';
}


std::string quote(std::string_view s) {
  std::string out;
  append_string(out, s);
  return out;
}

std::string number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15) std::snprintf(buf, sizeof buf, "%.0f", v);
  else std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

}  // namespace mpx::json
