#include "common/base/fatal_signal.h"

#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace pstrain {
namespace {

// What the handler reads: set once by install_fatal_signal_report() before
// any handler can run (a signal handler can reach nothing else).
char report_prefix[64] = "pstrain";

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGABRT: return "SIGABRT";
    default: return "signal";
  }
}

// Appends text to buf[0, cap) at *len (truncating): only what a handler may call.
void append(char* buf, std::size_t cap, std::size_t* len, const char* text) {
  while (*text != '\0' && *len + 1 < cap) buf[(*len)++] = *text++;
}

void append_number(char* buf, std::size_t cap, std::size_t* len, std::uintptr_t value, unsigned base) {
  char digits[32];
  int n = 0;
  do {
    const auto d = static_cast<unsigned>(value % base);
    digits[n++] = static_cast<char>(d < 10 ? '0' + d : 'a' + (d - 10));
    value /= base;
  } while (value != 0 && n < 32);
  if (base == 16) append(buf, cap, len, "0x");
  while (n > 0 && *len + 1 < cap) buf[(*len)++] = digits[--n];
}

void write_all(const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = write(STDERR_FILENO, data, size);
    if (n <= 0) return;
    data += n;
    size -= static_cast<std::size_t>(n);
  }
}

void on_fatal_signal(int sig, siginfo_t* info, void*) {
  alarm(5);  // a report that blocks (a fault in the unwinder, a full pipe) still ends in death
  char line[256];
  std::size_t len = 0;
  append(line, sizeof(line), &len, report_prefix);
  append(line, sizeof(line), &len, ": fatal signal ");
  append_number(line, sizeof(line), &len, static_cast<std::uintptr_t>(sig), 10);
  append(line, sizeof(line), &len, " (");
  append(line, sizeof(line), &len, signal_name(sig));
  append(line, sizeof(line), &len, ")");
  if (info != nullptr && info->si_code > 0 && (sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL)) {
    append(line, sizeof(line), &len, " at address ");
    append_number(line, sizeof(line), &len, reinterpret_cast<std::uintptr_t>(info->si_addr), 16);
  }
  if (info != nullptr && info->si_code <= 0) {  // sent by a process (kill, raise), not a fault
    append(line, sizeof(line), &len, ", sent by pid ");
    append_number(line, sizeof(line), &len, static_cast<std::uintptr_t>(info->si_pid), 10);
  }
  append(line, sizeof(line), &len, "; backtrace:\n");
  write_all(line, len);
  void* frames[64];
  const int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  // SA_RESETHAND put the default action back: this ends the process with the signal.
  raise(sig);
}

}  // namespace

void install_fatal_signal_report(const char* program) {
  std::size_t len = 0;
  append(report_prefix, sizeof(report_prefix), &len, program);
  report_prefix[len] = '\0';
  {
    void* warm[2];
    (void)backtrace(warm, 2);  // loads what backtrace needs now, not inside a handler
  }
  // An alternate stack for this thread, unless it has one, so that a stack
  // overflow is reported too (never freed: the process may need it until it
  // ends).
  stack_t current{};
  if (sigaltstack(nullptr, &current) == 0 && (current.ss_flags & SS_DISABLE) != 0) {
    stack_t alt{};
    alt.ss_size = 64 * 1024;
    alt.ss_sp = new char[alt.ss_size];
    alt.ss_flags = 0;
    sigaltstack(&alt, nullptr);
  }
  struct sigaction action {};
  action.sa_sigaction = on_fatal_signal;
  action.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&action.sa_mask);
  for (const int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(sig, &action, nullptr);
}

}  // namespace pstrain
