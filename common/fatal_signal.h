// A node that dies of a fatal signal says so before it goes: which signal,
// the faulting address, and a backtrace (addresses with symbols where the
// binary has them), on stderr, then the signal is raised again with its
// default action, so the exit status still names it (128 + signal to a
// shell, WTERMSIG to a parent). Without this a crashed node leaves an empty
// log and only an exit code (CI once saw a woken worker exit that way).
//
// Covers SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT (std::terminate's
// message comes first, then this report). The handler runs on an alternate
// stack, so a stack overflow is reported too; it uses only write(2) and
// glibc's backtrace (loaded here, before any fault).
//
// Signal dispositions belong to the whole process: the programs' main()
// installs this once (common/node_cli.h, guarded_main), libraries never do.
#pragma once

namespace pstrain {

// `program` (kept, at most 63 characters) prefixes the report.
void install_fatal_signal_report(const char* program);

}  // namespace pstrain
