// Tests for core/json: the strict bounded parser, UTF-8 checks and the writers shared by safetensors, metrics and bench.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>

#include "core/json.h"

using namespace mpx;

namespace {

json::Value parse(const std::string& s) { return json::parse(s.data(), s.size()); }

std::string parse_error(const std::string& s) {
  try {
    parse(s);
  } catch (const json::ParseError& e) {
    return std::to_string(e.pos) + ": " + e.what;
  }
  return "";
}

}  // namespace

TEST_CASE("json::parse reads every kind of value, numbers as written", "[json]") {
  const json::Value v = parse(R"( {"a": [1, -2.5e3, true, false, null], "b": {"c": "x\u00e9\n"}, "n": 18446744073709551615} )");
  REQUIRE(v.kind == json::Value::Object);
  REQUIRE(v.members.size() == 3);
  const json::Value* a = v.find("a");
  REQUIRE(a);
  REQUIRE(a->items.size() == 5);
  CHECK(a->items[0].text == "1");
  CHECK(a->items[1].text == "-2.5e3");
  CHECK((a->items[2].kind == json::Value::Bool && a->items[2].b));
  CHECK((a->items[3].kind == json::Value::Bool && !a->items[3].b));
  CHECK(a->items[4].kind == json::Value::Null);
  CHECK(v.find("b")->find("c")->text == "x\xc3\xa9\n");
  CHECK(v.find("n")->text == "18446744073709551615");  // wider than a double, kept exact
  CHECK(v.find("missing") == nullptr);
  CHECK(a->find("a") == nullptr);  // not an object
  uint64_t u = 0;
  CHECK(json::as_u63(a->items[0], &u));
  CHECK(u == 1);
  CHECK_FALSE(json::as_u63(a->items[1], &u));
  CHECK_FALSE(json::as_u63(*v.find("n"), &u));  // beyond int64
}

TEST_CASE("json::parse refuses malformed and hostile text, naming the offset", "[json]") {
  CHECK(parse_error("{\"a\": 1, \"a\": 2}").find("duplicate name \"a\"") != std::string::npos);
  CHECK(parse_error("[1, 2] x").find("trailing") != std::string::npos);
  CHECK(parse_error("[01]").find("expected ',' or ']'") != std::string::npos);
  CHECK(parse_error("\"a\x01\"").find("control character") != std::string::npos);
  CHECK(parse_error("\"\\ud800\"").find("surrogate") != std::string::npos);
  CHECK(parse_error("[1.]").find("digits expected after '.'") != std::string::npos);
  CHECK(parse_error("").find("unexpected end") != std::string::npos);
  CHECK(parse_error(std::string(66, '[') + std::string(66, ']')).find("nesting deeper than 64") != std::string::npos);
  CHECK(parse_error("{\"a\" 1}").rfind("5: ", 0) == 0);  // the offset of the missing ':'
}

TEST_CASE("json::invalid_utf8_at finds overlong forms, surrogates and truncation", "[json]") {
  const std::string ok = "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";
  CHECK(json::invalid_utf8_at(ok.data(), ok.size()) == std::string::npos);
  for (const std::string bad : {std::string("\xc0\xaf"), std::string("\xed\xa0\x80"), std::string("ab\xe2\x82"),
                                std::string("\xf4\x90\x80\x80"), std::string("\xff")}) {
    INFO(bad.size());
    CHECK(json::invalid_utf8_at(bad.data(), bad.size()) != std::string::npos);
  }
  CHECK(json::invalid_utf8_at("ab\xff", 3) == 2);
}

TEST_CASE("json writers escape every control character and round-trip through the parser", "[json]") {
  const std::string nasty = std::string("q\"b\\s/\n\t\x01\x1f") + "\xc3\xa9";
  const std::string q = json::quote(nasty);
  CHECK(q == "\"q\\\"b\\\\s/\\u000a\\u0009\\u0001\\u001f\xc3\xa9\"");
  CHECK(parse(q).text == nasty);
  CHECK(json::number(3) == "3");
  CHECK(json::number(-0.5) == "-0.5");
  CHECK(json::number(1e20) == "1e+20");
  CHECK(json::number(0.1f) == "0.100000001");
  CHECK(json::number(std::nan("")) == "null");
  CHECK(json::number(std::numeric_limits<double>::infinity()) == "null");
  std::string doc = "{";
  json::append_string(doc, "k");
  doc += ": " + json::number(2.25) + "}";
  CHECK(parse(doc).find("k")->text == "2.25");
}
