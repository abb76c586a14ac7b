#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/matcher.h"

namespace rotor::grammar {
namespace {

// The schema's grammar accepts exactly these sentences among `good` and `bad`.
void Check(std::string_view schema, std::initializer_list<std::string_view> good,
           std::initializer_list<std::string_view> bad) {
  auto text = JsonSchemaToGrammar(schema);
  ASSERT_TRUE(text.ok()) << text.status().message();
  auto g = ParseGrammar(*text);
  ASSERT_TRUE(g.ok()) << g.status().message() << "\n" << *text;
  for (std::string_view s : good) {
    Matcher m(*g);
    EXPECT_TRUE(m.Accept(s) && m.CanEnd()) << schema << "\nshould accept " << s << "\n" << *text;
  }
  for (std::string_view s : bad) {
    Matcher m(*g);
    EXPECT_FALSE(m.Accept(s) && m.CanEnd()) << schema << "\nshould reject " << s << "\n" << *text;
  }
}

TEST(JsonSchema, Primitives) {
  Check(R"({"type": "string"})", {R"("")", R"("a b \" \u00e9")"}, {"x", R"("a)", "1"});
  Check(R"({"type": "integer"})", {"0", "-12", "123"}, {"1.5", "01", "-", "\"1\""});
  Check(R"({"type": "number"})", {"0", "-1.5", "2e10", "3.25E-2"}, {"1.", ".5", "+1"});
  Check(R"({"type": "boolean"})", {"true", "false"}, {"null", "1"});
  Check(R"({"type": "null"})", {"null"}, {"nul", "0"});
  Check(R"({"type": ["integer", "null"]})", {"null", "7"}, {"true"});
  Check(R"({})", {"1", R"({"a": [null]})", "\"s\""}, {"nope"});
  Check(R"(true)", {"1"}, {"x"});
}

TEST(JsonSchema, StringsLengthAndFormats) {
  Check(R"({"type": "string", "minLength": 2, "maxLength": 3})", {R"("ab")", R"("abc")"},
        {R"("a")", R"("abcd")"});
  Check(R"({"type": "string", "format": "date"})", {R"("2024-02-29")"},
        {R"("2024-13-01")", R"("24-01-01")"});
  Check(R"({"type": "string", "format": "date-time"})", {R"("2024-02-29T12:30:00Z")"},
        {R"("2024-02-29 12:30:00")"});
  Check(R"({"type": "string", "format": "uuid"})", {R"("123e4567-e89b-12d3-a456-426614174000")"},
        {R"("123")"});
}

TEST(JsonSchema, EnumAndConst) {
  Check(R"({"enum": ["red", "green", 3, null]})", {R"("red")", R"("green")", "3", "null"},
        {R"("blue")", "4"});
  Check(R"({"const": {"a": [1, "x"]}})", {R"({"a":[1,"x"]})"}, {R"({"a": [1, "x"]})"});
}

// Optional properties: every subset, in schema order, each at most once. The
// grammar grows linearly with their number (it was quadratic: 3,000 of them
// took 80 s and 5.4 GiB to convert and parse).
TEST(JsonSchema, ManyOptionalPropertiesAreEverySubsetInOrder) {
  const char* names[] = {"a", "b", "c", "d"};
  std::vector<std::string> good;
  for (int mask = 0; mask < 16; ++mask) {
    std::string obj = "{";
    for (int i = 0; i < 4; ++i)
      if (mask >> i & 1) obj += std::string(obj.size() > 1 ? ", " : "") + "\"" + names[i] + "\": 1";
    good.push_back(obj + "}");
  }
  const char* schema = R"({"properties": {"a": {"type": "integer"}, "b": {"type": "integer"},
      "c": {"type": "integer"}, "d": {"type": "integer"}}})";
  auto text = JsonSchemaToGrammar(schema);
  ASSERT_TRUE(text.ok());
  auto g = ParseGrammar(*text);
  ASSERT_TRUE(g.ok()) << g.status().message();
  for (const std::string& obj : good) {
    Matcher m(*g);
    EXPECT_TRUE(m.Accept(obj) && m.CanEnd()) << obj << "\n" << *text;
  }
  Check(schema, {}, {R"({"b": 1, "a": 1})", R"({"a": 1, "a": 1})", R"({"d": 1, "c": 1})",
                     R"({"a": 1, "c": 1, "b": 1})", R"({"a": 1,, "b": 1})"});
  std::string wide = R"({"properties": {)";
  for (int i = 0; i < 3000; ++i)
    wide += (i ? ", " : "") + fmt::format(R"("p{}": {{"type": "integer"}})", i);
  auto big = JsonSchemaToGrammar(wide + "}}");
  ASSERT_TRUE(big.ok()) << big.status().message();
  EXPECT_LT(big->size(), 3000u * 200) << "not linear in the number of properties";
  EXPECT_TRUE(ParseGrammar(*big).ok());
}

TEST(JsonSchema, Objects) {
  const char* s = R"({"type": "object", "properties": {
      "name": {"type": "string"}, "age": {"type": "integer"}, "tags": {"type": "array",
      "items": {"type": "string"}}}, "required": ["name", "age"], "additionalProperties": false})";
  Check(s,
        {R"({"name": "a", "age": 3})", R"({"name":"a","age":3,"tags":["x","y"]})",
         R"({ "name": "a", "age": 3, "tags": [] })"},
        {R"({"name": "a"})", R"({"age": 3, "name": "a"})", R"({"name": "a", "age": 3, "x": 1})",
         R"({"name": "a", "age": "3"})"});
  // All optional: any subset, in schema order.
  Check(R"({"properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}})",
        {"{}", R"({"a": 1})", R"({"b": 2})", R"({"a": 1, "b": 2})"},
        {R"({"b": 2, "a": 1})", R"({, "b": 2})", R"({"a": 1,})"});
  Check(R"({"type": "object", "additionalProperties": {"type": "integer"}})",
        {"{}", R"({"x": 1, "y": 2})"}, {R"({"x": "1"})"});
  Check(R"({"type": "object", "additionalProperties": false})", {"{}"}, {R"({"x": 1})"});
  Check(R"({"type": "object", "properties": {"we\"ird": {"const": 1}}, "required": ["we\"ird"]})",
        {R"({"we\"ird": 1})"}, {"{}"});
}

TEST(JsonSchema, Arrays) {
  Check(R"({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3})",
        {"[1]", "[1, 2, 3]"}, {"[]", "[1, 2, 3, 4]", "[\"a\"]"});
  Check(R"({"type": "array", "maxItems": 0})", {"[]"}, {"[1]"});
  Check(R"({"type": "array", "minItems": 2})", {"[1, \"a\"]"}, {"[1]"});
}

TEST(JsonSchema, AlternativesAndRefs) {
  Check(R"({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 1}]})", {"1", R"("a")"},
        {R"("ab")", "true"});
  Check(R"({"oneOf": [{"const": 1}, {"const": 2}]})", {"1", "2"}, {"3"});
  const char* tree = R"({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object",
      "properties": {"v": {"type": "integer"}, "kids": {"type": "array",
      "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}}})";
  Check(tree, {R"({"v": 1})", R"({"v": 1, "kids": [{"v": 2, "kids": []}, {"v": 3}]})"},
        {R"({"kids": []})"});
  Check(R"({"properties": {"p": {"$ref": "#/definitions/pt"}}, "required": ["p"],
        "definitions": {"pt": {"enum": ["x"]}}})",
        {R"({"p": "x"})"}, {R"({"p": "y"})"});
}

TEST(JsonSchema, UnsupportedIsAnErrorNamingThePath) {
  struct Bad {
    const char* schema;
    const char* error;
  } cases[] = {
      {R"({"type": "string", "pattern": "^a"})",
       "json schema: at #: unsupported keyword 'pattern'"},
      {R"({"properties": {"a": {"type": "integer", "minimum": 0}}})",
       "at #/properties/a: unsupported keyword 'minimum'"},
      {R"({"type": "strin"})", "at #/type: unknown type 'strin'"},
      {R"({"$ref": "#/$defs/none"})", "at #/$ref: $ref '#/$defs/none' names no definition"},
      {R"({"$ref": "http://x/y"})", "unsupported $ref 'http://x/y'"},
      {R"({"items": {"format": "email", "type": "string"}})",
       "at #/items/format: unsupported format \"email\""},
      {R"({"required": ["a"], "properties": {}})", "at #/required: 'a' is required but not in"},
      {R"({"enum": []})", "at #/enum: must be a non-empty array"},
      {R"({"anyOf": [{"type": "integer"}, 3]})", "at #/anyOf/1: a schema must be an object"},
      {R"({"type": "array", "minItems": 3, "maxItems": 1})", "maxItems is below minItems"},
      {R"(false)", "schema 'false' allows no value"},
      {R"({"type": )", "json schema: not valid JSON"},
      {R"({"allOf": [{}, {}]})", "only an allOf of exactly one schema"},
  };
  for (const Bad& c : cases) {
    auto r = JsonSchemaToGrammar(c.schema);
    ASSERT_FALSE(r.ok()) << c.schema;
    EXPECT_NE(r.status().message().find(c.error), std::string::npos) << c.schema << "\n"
                                                                     << r.status().message();
  }
}

TEST(JsonSchema, SelfReferenceWithoutInputIsAnErrorNotAHang) {
  auto text =
      JsonSchemaToGrammar(R"({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}})");
  ASSERT_TRUE(text.ok());
  auto g = ParseGrammar(*text);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("left recursion"), std::string::npos);
}

// Arrays of arrays `depth` deep around an integer.
std::string NestedArrays(int depth) {
  std::string s;
  for (int i = 0; i < depth; ++i) s += R"({"type": "array", "items": )";
  s += R"({"type": "integer"})";
  s.append(depth, '}');
  return s;
}

// A schema nested thousands of levels deep (a 300 KB request) crashed the
// server (the converter's recursion overflowed the stack after taking
// gigabytes for its rule names): 64 levels work, deeper is an error.
TEST(JsonSchema, NestingDeeperThan64LevelsIsAnError) {
  Check(NestedArrays(63), {std::string(63, '[') + "7" + std::string(63, ']')},
        {std::string(62, '[') + "7" + std::string(62, ']')});
  for (int depth : {64, 255}) {
    auto r = JsonSchemaToGrammar(NestedArrays(depth));
    ASSERT_FALSE(r.ok()) << depth;
    EXPECT_NE(r.status().message().find("schemas nested deeper than 64 levels"),
              std::string::npos)
        << r.status().message().substr(0, 200);
    EXPECT_NE(r.status().message().find("at #/items/items/"), std::string::npos);
  }
  // Deeper than any JSON text rotor parses (base/json_depth.h): refused unread.
  auto r = JsonSchemaToGrammar(NestedArrays(12000));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("json schema: arrays and objects nested 12001 deep, more "
                                      "than the 256 allowed"),
            std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace rotor::grammar
