// A small, strict JSON reader for the run directory's own files (metrics
// lines, summary.json): objects, arrays, strings, numbers, true/false/null.
//
// Strict: no comments, no trailing commas, no duplicate keys, no leading
// zeros, no text after the value, nesting at most 32 levels deep. Numbers are
// held as double (exact for integers up to 2^53). Errors are DataError whose
// text is "<where>: column C: <what>", `where` given by the caller (e.g.
// "run/metrics/worker-0.jsonl:12").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pstrain::report {

class JsonValue {
 public:
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::kNull; }

  // Typed access; each throws DataError naming `what` (e.g. "key 'loss'")
  // and the kind found when the value has another kind.
  bool as_bool(std::string_view what) const;
  double as_number(std::string_view what) const;
  // A number that is an integer (no fraction, within +-2^53).
  std::int64_t as_integer(std::string_view what) const;
  const std::string& as_string(std::string_view what) const;

  // Arrays: the elements. Objects: the values, in file order, with keys().
  const std::vector<JsonValue>& items() const { return items_; }
  const std::vector<std::string>& keys() const { return keys_; }
  // The member named `key` of an object, or nullptr (also for non-objects).
  const JsonValue* find(std::string_view key) const;

  static JsonValue null() { return JsonValue(Kind::kNull); }
  static JsonValue boolean(bool b);
  static JsonValue number(double x);
  static JsonValue string(std::string s);
  static JsonValue array(std::vector<JsonValue> items);
  static JsonValue object(std::vector<std::string> keys, std::vector<JsonValue> values);

 private:
  explicit JsonValue(Kind kind) : kind_(kind) {}

  Kind kind_ = Kind::kNull;
  bool boolean_ = false;
  double number_ = 0.0;
  std::string text_;
  std::vector<std::string> keys_;
  std::vector<JsonValue> items_;
};

std::string_view kind_name(JsonValue::Kind kind);

// Parses one JSON text; `where` prefixes error messages.
JsonValue parse_json(std::string_view text, std::string_view where);

}  // namespace pstrain::report
