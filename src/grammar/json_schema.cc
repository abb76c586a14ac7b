// JSON Schema -> GBNF. Each schema becomes a GBNF expression; objects,
// arrays, alternatives and $ref targets get rules of their own, named after
// where they are in the schema. Keywords that only describe (title,
// description, ...) are ignored; a keyword that constrains values and is not
// supported is an error naming its schema path, so a grammar never silently
// allows what the schema forbids.
//
// What the generated grammar produces (docs/GRAMMAR.md):
//   object   required properties in schema order, then optional ones in
//            schema order, each at most once; no other properties (valid
//            whatever additionalProperties says, since they are optional);
//            with no properties and additionalProperties a schema: a map
//   array    items (any value if absent), minItems..maxItems
//   anyOf/oneOf  any one branch (oneOf's "exactly one" is not enforced)
#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "base/json_depth.h"
#include "grammar/grammar.h"

namespace rotor::grammar {
namespace {

using Json = nlohmann::ordered_json;

// Schemas inside schemas (items, properties, anyOf, $ref targets, ...).
constexpr int kMaxSchemaDepth = 64;

struct SchemaError {
  std::string path, message;
};

constexpr std::string_view kPrimitives[][2] = {
    {"ws", R"(( " " | "\n" [ \t]{0,8} )?)"},
    {"char", R"([^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ))"},
    {"string", R"("\"" char{0,256} "\"")"},
    {"integer", R"("-"? ( "0" | [1-9] [0-9]{0,15} ))"},
    {"number", R"(integer ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?)"},
    {"boolean", R"("true" | "false")"},
    {"null", R"("null")"},
    {"value", R"(object | array | string | number | boolean | null)"},
    {"object",
     R"("{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}")"},
    {"array", R"("[" ws ( value ws ( "," ws value ws )* )? "]")"},
    {"digit2", R"([0-9]{2})"},
    {"date",
     R"("\"" [0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ) "\"")"},
    {"time-part",
     R"(( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,6} )? ( "Z" | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))"},
    {"time", R"("\"" time-part "\"")"},
    {"date-time",
     R"("\"" [0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ) "T" time-part "\"")"},
    {"uuid",
     R"("\"" [0-9a-f]{8} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{12} "\"")"},
};

// Which primitives each one uses.
const std::map<std::string_view, std::vector<std::string_view>>& PrimitiveDeps() {
  static const auto* deps = new std::map<std::string_view, std::vector<std::string_view>>{
      {"string", {"char"}},
      {"number", {"integer"}},
      {"value", {"object", "array", "string", "number", "boolean", "null"}},
      {"object", {"ws", "string", "value"}},
      {"array", {"ws", "value"}},
      {"time", {"time-part"}},
      {"date-time", {"time-part"}},
  };
  return *deps;
}

// `s` as a GBNF literal: "..." with \ " and control characters escaped.
std::string Literal(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (u < 0x20) {
      out += fmt::format("\\x{:02x}", u);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// A JSON value's exact text (enum, const) as a GBNF literal.
std::string ValueLiteral(const Json& v) { return Literal(v.dump()); }

class Converter {
 public:
  explicit Converter(const Json& root) : root_(root) {}

  std::string Convert() {
    const std::string body = Visit(root_, "root", "#");
    std::string out = "root ::= " + body + "\n";
    for (const auto& [name, rule] : rules_) out += name + " ::= " + rule + "\n";
    std::set<std::string_view> done;
    std::vector<std::string_view> todo(used_.begin(), used_.end());  // views into used_
    while (!todo.empty()) {
      const std::string_view p = todo.back();
      todo.pop_back();
      if (!done.insert(p).second) continue;
      for (const auto& prim : kPrimitives)
        if (prim[0] == p) out += std::string(p) + " ::= " + std::string(prim[1]) + "\n";
      if (auto it = PrimitiveDeps().find(p); it != PrimitiveDeps().end())
        todo.insert(todo.end(), it->second.begin(), it->second.end());
    }
    return out;
  }

 private:
  [[noreturn]] static void Fail(const std::string& path, std::string message) {
    throw SchemaError{path, std::move(message)};
  }
  std::string Use(std::string_view primitive) {
    used_.insert(std::string(primitive));
    return std::string(primitive);
  }
  // A new rule named after `hint` (the schema path's last parts).
  std::string AddRule(const std::string& hint, const std::string& body) {
    std::string base;
    for (const char c : hint) base += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
    if (base.empty() || base == "root") base = "r";
    std::string name = "s-" + base;
    // The next free suffix from the last one given (from 2 each time, many
    // names alike, such as properties "a!", "a?", ..., took quadratic time).
    for (int& i = last_suffix_[name]; rules_.contains(name) || reserved_.contains(name);)
      name = fmt::format("s-{}-{}", base, i = std::max(i, 1) + 1);
    rules_[name] = body;
    return name;
  }

  std::string Visit(const Json& s, const std::string& hint, const std::string& path);
  std::string VisitType(const Json& s, const std::string& type, const std::string& hint,
                        const std::string& path);
  std::string VisitObject(const Json& s, const std::string& hint, const std::string& path);
  std::string VisitArray(const Json& s, const std::string& hint, const std::string& path);
  std::string VisitString(const Json& s, const std::string& path);
  // s[key], a length or item count in [0, 1000]; def when absent.
  int64_t Count(const Json& s, const char* key, int64_t def, const std::string& path);
  std::string Ref(const std::string& ref, const std::string& path);
  static void CheckKeywords(const Json& s, const std::string& path);

  const Json& root_;
  std::map<std::string, std::string> rules_;
  std::set<std::string> reserved_;
  std::map<std::string, std::string> refs_;  // $ref -> its rule
  std::map<std::string, int> last_suffix_;   // the last suffix given, per rule name
  std::set<std::string> used_;
  int depth_ = 0;  // of the Visit calls in progress
};

void Converter::CheckKeywords(const Json& s, const std::string& path) {
  static const std::set<std::string_view> known = {
      "type", "properties", "required", "additionalProperties", "enum", "const", "items",
      "minItems", "maxItems", "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions",
      "minLength", "maxLength", "format",
      // Annotations: no effect on which values are valid.
      "title", "description", "examples", "default", "$schema", "$id", "$comment", "deprecated",
      "readOnly", "writeOnly", "strict", "name"};
  for (const auto& [key, unused] : s.items())
    if (!known.contains(key))
      Fail(path, fmt::format("unsupported keyword '{}' (supported: type, properties, required, "
                             "additionalProperties, enum, const, items, minItems, maxItems, "
                             "anyOf, oneOf, $ref, minLength, maxLength, format)",
                             key));
}

std::string Converter::Visit(const Json& s, const std::string& hint, const std::string& path) {
  // Each level is a call here and adds to the rule names and paths, so an
  // unbounded nesting (one small request) would exhaust the stack or memory.
  if (depth_ >= kMaxSchemaDepth)
    Fail(path, fmt::format("schemas nested deeper than {} levels", kMaxSchemaDepth));
  ++depth_;
  struct Leave {
    int& depth;
    ~Leave() { --depth; }
  } leave{depth_};
  if (s.is_boolean()) {
    if (!s.get<bool>()) Fail(path, "schema 'false' allows no value");
    return Use("value");
  }
  if (!s.is_object()) Fail(path, "a schema must be an object or a boolean, not " + s.dump());
  CheckKeywords(s, path);
  if (s.contains("$ref")) {
    static const std::set<std::string_view> beside_ref = {
        "$ref", "$defs", "definitions", "title", "description", "$schema", "$id", "$comment"};
    for (const auto& [key, unused] : s.items())
      if (!beside_ref.contains(key))
        Fail(path, fmt::format("'$ref' next to '{}' is not supported", key));
    if (!s["$ref"].is_string()) Fail(path + "/$ref", "must be a string");
    return Ref(s["$ref"].get<std::string>(), path + "/$ref");
  }
  if (s.contains("const")) return ValueLiteral(s["const"]);
  if (s.contains("enum")) {
    const Json& e = s["enum"];
    if (!e.is_array() || e.empty()) Fail(path + "/enum", "must be a non-empty array");
    std::string body;
    for (const Json& v : e) body += (body.empty() ? "" : " | ") + ValueLiteral(v);
    return AddRule(hint, body);
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    if (!s.contains(key)) continue;
    const Json& alts = s[key];
    if (!alts.is_array() || alts.empty())
      Fail(path + "/" + key, "must be a non-empty array of schemas");
    std::string body;
    for (size_t i = 0; i < alts.size(); ++i)
      body += (i ? " | " : "") +
              Visit(alts[i], fmt::format("{}-{}", hint, i), fmt::format("{}/{}/{}", path, key, i));
    return AddRule(hint, body);
  }
  if (s.contains("allOf")) {
    const Json& all = s["allOf"];
    if (!all.is_array() || all.size() != 1)
      Fail(path + "/allOf", "only an allOf of exactly one schema is supported");
    return Visit(all[0], hint, path + "/allOf/0");
  }
  if (!s.contains("type")) {
    if (s.contains("properties")) return VisitType(s, "object", hint, path);
    if (s.contains("items")) return VisitType(s, "array", hint, path);
    return Use("value");
  }
  const Json& type = s["type"];
  if (type.is_string()) return VisitType(s, type.get<std::string>(), hint, path);
  if (!type.is_array() || type.empty())
    Fail(path + "/type", "must be a type name or a non-empty array of them");
  std::string body;
  for (const Json& t : type) {
    if (!t.is_string()) Fail(path + "/type", "must be a type name or an array of them");
    body += (body.empty() ? "" : " | ") +
            VisitType(s, t.get<std::string>(), hint + "-" + t.get<std::string>(), path);
  }
  return AddRule(hint, body);
}

std::string Converter::VisitType(const Json& s, const std::string& type, const std::string& hint,
                                 const std::string& path) {
  if (type == "object") return VisitObject(s, hint, path);
  if (type == "array") return VisitArray(s, hint, path);
  if (type == "string") return VisitString(s, path);
  if (type == "number" || type == "integer" || type == "boolean" || type == "null")
    return Use(type);
  Fail(path + "/type", fmt::format("unknown type '{}'", type));
}

int64_t Converter::Count(const Json& s, const char* key, int64_t def, const std::string& path) {
  if (!s.contains(key)) return def;
  const Json& v = s[key];
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 1000)
    Fail(path + "/" + key, "must be an integer in [0, 1000]");
  return v.get<int64_t>();
}

std::string Converter::VisitString(const Json& s, const std::string& path) {
  if (s.contains("format")) {
    const std::string f = s["format"].is_string() ? s["format"].get<std::string>() : "";
    if (f == "date" || f == "time" || f == "date-time" || f == "uuid") return Use(f);
    Fail(path + "/format",
         fmt::format("unsupported format {} (supported: date, time, date-time, uuid)",
                     s["format"].dump()));
  }
  if (!s.contains("minLength") && !s.contains("maxLength")) return Use("string");
  const int64_t lo = Count(s, "minLength", 0, path), hi = Count(s, "maxLength", -1, path);
  if (hi >= 0 && hi < lo) Fail(path, "maxLength is below minLength");
  Use("char");
  return hi < 0 ? fmt::format(R"("\"" char{{{},}} "\"")", lo)
                : fmt::format(R"("\"" char{{{},{}}} "\"")", lo, hi);
}

std::string Converter::VisitObject(const Json& s, const std::string& hint,
                                   const std::string& path) {
  Use("ws");
  std::set<std::string> required;
  if (s.contains("required")) {
    if (!s["required"].is_array()) Fail(path + "/required", "must be an array of names");
    for (const Json& r : s["required"]) {
      if (!r.is_string()) Fail(path + "/required", "must be an array of names");
      required.insert(r.get<std::string>());
    }
  }
  const Json* props = s.contains("properties") ? &s["properties"] : nullptr;
  if (props != nullptr && !props->is_object())
    Fail(path + "/properties", "must be an object of schemas");
  for (const std::string& r : required)
    if (props == nullptr || !props->contains(r))
      Fail(path + "/required", fmt::format("'{}' is required but not in properties", r));
  if (props == nullptr || props->empty()) {
    const Json* extra = s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
    if (extra == nullptr || extra->is_boolean()) {
      // No properties: an empty object (false), or any object.
      if (extra != nullptr && !extra->get<bool>()) return AddRule(hint, R"("{" ws "}")");
      return Use("object");
    }
    const std::string v = Visit(*extra, hint + "-value", path + "/additionalProperties");
    Use("string");
    const std::string kv = fmt::format(R"(string ws ":" ws {} ws)", v);
    return AddRule(hint, fmt::format(R"("{{" ws ( {} ( "," ws {} )* )? "}}")", kv, kv));
  }
  std::vector<std::string> req, opt;
  for (const auto& [name, schema] : props->items()) {
    const std::string v = Visit(schema, hint + "-" + name, path + "/properties/" + name);
    const std::string kv =
        AddRule(hint + "-" + name + "-kv",
                fmt::format(R"({} ws ":" ws {} ws)", Literal(Json(name).dump()), v));
    (required.contains(name) ? req : opt).push_back(kv);
  }
  std::string body = R"("{" ws )";
  for (size_t i = 0; i < req.size(); ++i) body += (i ? R"("," ws )" : "") + req[i] + " ";
  if (!req.empty()) {
    for (const std::string& o : opt) body += R"(( "," ws )" + o + " )? ";
  } else if (!opt.empty()) {
    // The first optional property present leads; each later one may follow.
    // The later ones are a chain of rules, rest_i ::= ( "," ws opt_i )?
    // rest_i+1, shared by the alternatives: written out in each, n optional
    // properties made n^2 / 2 groups (3,000 of them, a 60 KB schema, took
    // 80 s and 5.4 GiB).
    std::vector<std::string> rest(opt.size() + 1);  // rest[i]: from property i on; rest[n] = ""
    for (size_t i = opt.size() - 1; i >= 1; --i)
      rest[i] = AddRule(hint + "-rest", fmt::format(R"(( "," ws {} )? {})", opt[i], rest[i + 1]));
    std::string alts;
    for (size_t i = 0; i < opt.size(); ++i) alts += (i ? " | " : "") + opt[i] + " " + rest[i + 1];
    body += "( " + AddRule(hint + "-props", alts) + " )? ";
  }
  return AddRule(hint, body + R"("}")");
}

std::string Converter::VisitArray(const Json& s, const std::string& hint, const std::string& path) {
  Use("ws");
  const std::string item =
      s.contains("items") ? Visit(s["items"], hint + "-item", path + "/items") : Use("value");
  const int64_t lo = Count(s, "minItems", 0, path), hi = Count(s, "maxItems", -1, path);
  if (hi >= 0 && hi < lo) Fail(path, "maxItems is below minItems");
  if (hi == 0) return AddRule(hint, R"("[" ws "]")");
  const std::string more = hi < 0 ? fmt::format("{{{},}}", std::max<int64_t>(lo - 1, 0))
                                  : fmt::format("{{{},{}}}", std::max<int64_t>(lo - 1, 0), hi - 1);
  const std::string list = fmt::format(R"({} ws ( "," ws {} ws ){})", item, item, more);
  return AddRule(hint, fmt::format(R"("[" ws {} "]")", lo == 0 ? "( " + list + " )?" : list));
}

std::string Converter::Ref(const std::string& ref, const std::string& path) {
  if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
  std::string_view name;
  const Json* defs = nullptr;
  for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
    if (ref.starts_with(prefix)) {
      name = std::string_view(ref).substr(std::string_view(prefix).size());
      const std::string key = std::string(prefix).substr(2, std::string_view(prefix).size() - 3);
      if (root_.contains(key)) defs = &root_[key];
    }
  }
  if (name.empty())
    Fail(path,
         fmt::format("unsupported $ref '{}' (only #/$defs/NAME and #/definitions/NAME)", ref));
  if (defs == nullptr || !defs->is_object() || !defs->contains(name))
    Fail(path, fmt::format("$ref '{}' names no definition", ref));
  // The rule's name is known before its body, so recursive schemas work.
  std::string base;
  for (const char c : name) base += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
  std::string rule = "def-" + base;
  for (int& i = last_suffix_[rule]; reserved_.contains(rule);)  // as AddRule's
    rule = fmt::format("def-{}-{}", base, i = std::max(i, 1) + 1);
  reserved_.insert(rule);
  refs_[ref] = rule;
  const std::string body = Visit((*defs)[std::string(name)], "def-" + base, ref);
  rules_[rule] = body;
  return rule;
}

}  // namespace

Result<std::string> JsonSchemaToGrammar(std::string_view schema_json) {
  if (const int depth = JsonNesting(schema_json); depth > kMaxJsonNesting)
    return Errorf("json schema: arrays and objects nested {} deep, more than the {} allowed",
                  depth, kMaxJsonNesting);
  Json schema;
  try {
    schema = Json::parse(schema_json);
  } catch (const nlohmann::json::exception& e) {
    return Errorf("json schema: not valid JSON: {}", e.what());
  }
  try {
    return Converter(schema).Convert();
  } catch (const SchemaError& e) {
    return Errorf("json schema: at {}: {}", e.path, e.message);
  }
}

}  // namespace rotor::grammar
