// Builds one flat JSON object, e.g. for a JSON-lines metrics record:
//   JsonLine().add("type", "step").add("loss", 0.42).str()
// Doubles are written in the shortest form that reads back as the same
// double (std::to_chars); non-finite doubles become null (JSON has no NaN). Not for nested structures beyond raw().
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace pstrain {

class JsonLine {
 public:
  JsonLine& add(std::string_view key, std::string_view value) {
    key_(key);
    quote(value);
    return *this;
  }
  JsonLine& add(std::string_view key, const char* value) { return add(key, std::string_view(value)); }
  JsonLine& add(std::string_view key, bool value) {
    key_(key);
    out_ += value ? "true" : "false";
    return *this;
  }
  JsonLine& add(std::string_view key, std::int64_t value) {
    key_(key);
    out_ += std::to_string(value);
    return *this;
  }
  JsonLine& add(std::string_view key, int value) { return add(key, static_cast<std::int64_t>(value)); }
  JsonLine& add(std::string_view key, double value) {
    key_(key);
    if (!std::isfinite(value)) {
      out_ += "null";
    } else {
      char buf[32];
      const auto result = std::to_chars(buf, buf + sizeof(buf), value);  // 24 characters at most
      out_.append(buf, result.ptr);
    }
    return *this;
  }
  // A value that is already JSON (an object or array built elsewhere).
  JsonLine& raw(std::string_view key, std::string_view json) {
    key_(key);
    out_ += json;
    return *this;
  }
  std::string str() const { return out_ + "}"; }

 private:
  void key_(std::string_view key) {
    out_ += out_.size() == 1 ? "" : ",";
    quote(key);
    out_ += ":";
  }
  void quote(std::string_view s) {
    out_ += '"';
    for (char c : s) {
      switch (c) {
        case '"': out_ += "\\\""; break;
        case '\\': out_ += "\\\\"; break;
        case '\n': out_ += "\\n"; break;
        case '\t': out_ += "\\t"; break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\u%04x", c);
            out_ += buf;
          } else {
            out_ += c;
          }
      }
    }
    out_ += '"';
  }
  std::string out_ = "{";
};

}  // namespace pstrain
