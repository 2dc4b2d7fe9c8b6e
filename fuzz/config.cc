// libFuzzer target: the run config parser (TOML text, then a --set override
// from the input's first line), which every node runs on its config.
#include <string>
#include <string_view>

#include "common/config/config.h"
#include "common/base/errors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto nl = text.find('\n');
  try {
    pstrain::RunConfig c = pstrain::parse_config(text.substr(nl == std::string_view::npos ? size : nl + 1), "fuzz.toml");
    pstrain::apply_override(c, text.substr(0, nl == std::string_view::npos ? 0 : nl));
    (void)pstrain::to_toml(c);
  } catch (const pstrain::Error&) {
  }
  return 0;
}
