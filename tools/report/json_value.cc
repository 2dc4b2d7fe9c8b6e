#include "tools/report/json_value.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "common/base/errors.h"

namespace pstrain::report {
namespace {

constexpr int kMaxDepth = 32;
constexpr double kMaxExactInteger = 9007199254740992.0;  // 2^53

class Parser {
 public:
  Parser(std::string_view text, std::string_view where) : text_(text), where_(where) {}

  JsonValue document() {
    JsonValue v = value(0);
    skip_space();
    if (pos_ != text_.size()) fail("unexpected text after the value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw DataError(std::string(where_) + ": column " + std::to_string(pos_ + 1) + ": " + what);
  }
  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }

  void skip_space() {
    while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r')) ++pos_;
  }

  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'" + found());
    ++pos_;
  }

  std::string found() const {
    if (at_end()) return ", found the end of the text";
    return std::string(", found '") + peek() + "'";
  }

  void literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) fail("expected a JSON value" + found());
    pos_ += word.size();
  }

  JsonValue value(int depth) {
    if (depth > kMaxDepth) fail("nesting deeper than " + std::to_string(kMaxDepth) + " levels");
    skip_space();
    switch (peek()) {
      case '{': return object(depth);
      case '[': return array(depth);
      case '"': return JsonValue::string(string());
      case 't': literal("true"); return JsonValue::boolean(true);
      case 'f': literal("false"); return JsonValue::boolean(false);
      case 'n': literal("null"); return JsonValue::null();
      default: return JsonValue::number(number());
    }
  }

  JsonValue object(int depth) {
    expect('{');
    std::vector<std::string> keys;
    std::vector<JsonValue> values;
    skip_space();
    if (peek() == '}') {
      ++pos_;
      return JsonValue::object({}, {});
    }
    for (;;) {
      skip_space();
      if (peek() != '"') fail("expected a key string" + found());
      std::string key = string();
      for (const std::string& k : keys) {
        if (k == key) fail("duplicate key '" + key + "'");
      }
      skip_space();
      expect(':');
      values.push_back(value(depth + 1));
      keys.push_back(std::move(key));
      skip_space();
      if (peek() == '}') break;
      expect(',');
    }
    ++pos_;
    return JsonValue::object(std::move(keys), std::move(values));
  }

  JsonValue array(int depth) {
    expect('[');
    std::vector<JsonValue> items;
    skip_space();
    if (peek() == ']') {
      ++pos_;
      return JsonValue::array({});
    }
    for (;;) {
      items.push_back(value(depth + 1));
      skip_space();
      if (peek() == ']') break;
      expect(',');
    }
    ++pos_;
    return JsonValue::array(std::move(items));
  }

  unsigned hex4() {
    if (pos_ + 4 > text_.size()) fail("truncated \\u escape");
    unsigned code = 0;
    const auto r = std::from_chars(text_.data() + pos_, text_.data() + pos_ + 4, code, 16);
    if (r.ec != std::errc() || r.ptr != text_.data() + pos_ + 4) fail("bad \\u escape");
    pos_ += 4;
    return code;
  }

  static void append_utf8(std::string& out, unsigned code) {
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xC0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else if (code < 0x10000) {
      out += static_cast<char>(0xE0 | (code >> 12));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (code >> 18));
      out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    }
  }

  unsigned unicode_escape() {
    unsigned code = hex4();
    if (code >= 0xD800 && code < 0xDC00) {  // a surrogate pair
      if (text_.substr(pos_, 2) != "\\u") fail("unpaired surrogate in \\u escape");
      pos_ += 2;
      const unsigned low = hex4();
      if (low < 0xDC00 || low >= 0xE000) fail("unpaired surrogate in \\u escape");
      code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
    } else if (code >= 0xDC00 && code < 0xE000) {
      fail("unpaired surrogate in \\u escape");
    }
    return code;
  }

  void escape(std::string& out) {
    const char c = peek();
    ++pos_;
    switch (c) {
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      case '/': out += '/'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'u': append_utf8(out, unicode_escape()); break;
      default: --pos_; fail("bad escape in a string");
    }
  }

  std::string string() {
    expect('"');
    std::string out;
    for (;;) {
      if (at_end()) fail("unterminated string");
      const char c = peek();
      if (c == '"') break;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      ++pos_;
      if (c == '\\') {
        escape(out);
      } else {
        out += c;
      }
    }
    ++pos_;
    return out;
  }

  void digits() {
    if (!(peek() >= '0' && peek() <= '9')) fail("expected a digit" + found());
    while (peek() >= '0' && peek() <= '9') ++pos_;
  }

  double number() {
    const std::size_t start = pos_;
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
      if (peek() >= '0' && peek() <= '9') fail("leading zero in a number");
    } else if (peek() >= '1' && peek() <= '9') {
      digits();
    } else {
      fail("expected a JSON value" + found());
    }
    if (peek() == '.') {
      ++pos_;
      digits();
    }
    if (peek() == 'e' || peek() == 'E') {
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      digits();
    }
    const std::string token(text_.substr(start, pos_ - start));
    const double x = std::strtod(token.c_str(), nullptr);
    if (!std::isfinite(x)) {
      pos_ = start;
      fail("number " + token + " is out of range");
    }
    return x;
  }

  std::string_view text_;
  std::string_view where_;
  std::size_t pos_ = 0;
};

[[noreturn]] void wrong_kind(std::string_view what, std::string_view expected, JsonValue::Kind found) {
  throw DataError(std::string(what) + ": expected " + std::string(expected) + ", got " +
                  std::string(kind_name(found)));
}

}  // namespace

std::string_view kind_name(JsonValue::Kind kind) {
  switch (kind) {
    case JsonValue::Kind::kNull: return "null";
    case JsonValue::Kind::kBool: return "a boolean";
    case JsonValue::Kind::kNumber: return "a number";
    case JsonValue::Kind::kString: return "a string";
    case JsonValue::Kind::kArray: return "an array";
    case JsonValue::Kind::kObject: return "an object";
  }
  return "?";
}

bool JsonValue::as_bool(std::string_view what) const {
  if (kind_ != Kind::kBool) wrong_kind(what, "a boolean", kind_);
  return boolean_;
}

double JsonValue::as_number(std::string_view what) const {
  if (kind_ != Kind::kNumber) wrong_kind(what, "a number", kind_);
  return number_;
}

std::int64_t JsonValue::as_integer(std::string_view what) const {
  const double x = as_number(what);
  if (x != std::floor(x) || std::fabs(x) > kMaxExactInteger) {
    throw DataError(std::string(what) + ": expected an integer, got " + std::to_string(x));
  }
  return static_cast<std::int64_t>(x);
}

const std::string& JsonValue::as_string(std::string_view what) const {
  if (kind_ != Kind::kString) wrong_kind(what, "a string", kind_);
  return text_;
}

const JsonValue* JsonValue::find(std::string_view key) const {
  if (kind_ != Kind::kObject) return nullptr;
  for (std::size_t i = 0; i < keys_.size(); ++i) {
    if (keys_[i] == key) return &items_[i];
  }
  return nullptr;
}

JsonValue JsonValue::boolean(bool b) {
  JsonValue v(Kind::kBool);
  v.boolean_ = b;
  return v;
}

JsonValue JsonValue::number(double x) {
  JsonValue v(Kind::kNumber);
  v.number_ = x;
  return v;
}

JsonValue JsonValue::string(std::string s) {
  JsonValue v(Kind::kString);
  v.text_ = std::move(s);
  return v;
}

JsonValue JsonValue::array(std::vector<JsonValue> items) {
  JsonValue v(Kind::kArray);
  v.items_ = std::move(items);
  return v;
}

JsonValue JsonValue::object(std::vector<std::string> keys, std::vector<JsonValue> values) {
  JsonValue v(Kind::kObject);
  v.keys_ = std::move(keys);
  v.items_ = std::move(values);
  return v;
}

JsonValue parse_json(std::string_view text, std::string_view where) { return Parser(text, where).document(); }

}  // namespace pstrain::report
