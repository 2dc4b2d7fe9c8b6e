#include "tools/report/text_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <system_error>

#include "common/base/errors.h"

namespace pstrain::report {

void write_text_file_atomic(const std::filesystem::path& file, const std::string& text) {
  const std::filesystem::path tmp = file.string() + ".tmp";
  {
    std::ofstream out(tmp);
    out << text;
    if (!out.flush()) throw Error("cannot write " + tmp.string() + ": " + std::strerror(errno));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, file, ec);
  if (ec) throw Error("cannot rename " + tmp.string() + " to " + file.string() + ": " + ec.message());
}

}  // namespace pstrain::report
