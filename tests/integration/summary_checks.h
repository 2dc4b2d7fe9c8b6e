// Checks of summary.json shared by the integration tests.
#pragma once

#include <doctest/doctest.h>

#include <string>

#include "tools/report/json_value.h"

namespace it {

// summary.json's "staleness" ({"mean", "max", "histogram"}) of a run with
// pushes: a non-empty histogram of positive counts, its largest key the max
// and its weighted mean the mean.
inline void check_staleness(const pstrain::report::JsonValue& staleness) {
  using pstrain::report::JsonValue;
  REQUIRE(staleness.kind() == JsonValue::Kind::kObject);
  const JsonValue* histogram = staleness.find("histogram");
  REQUIRE(histogram != nullptr);
  REQUIRE(histogram->kind() == JsonValue::Kind::kObject);
  REQUIRE_FALSE(histogram->keys().empty());
  double pushes = 0, weighted = 0, largest = -1;
  for (std::size_t i = 0; i < histogram->keys().size(); ++i) {
    const double value = std::stod(histogram->keys()[i]);
    const double count = histogram->items()[i].as_number("count");
    CAPTURE(value);
    CHECK(count > 0);  // only staleness values that occurred are listed
    pushes += count;
    weighted += value * count;
    if (value > largest) largest = value;
  }
  CHECK(staleness.find("max")->as_number("max") == largest);
  // summary.json writes 9 significant digits (tools/report/json_text.cc): up to 5e-9 relative.
  CHECK(staleness.find("mean")->as_number("mean") == doctest::Approx(weighted / pushes).epsilon(1e-8));
}

}  // namespace it
