// A node that dies of a fatal signal says so before it goes: which signal,
// the faulting address, and a backtrace (addresses with symbols where the
// binary has them), on stderr, then the signal is raised again with its
// default action, so the exit status still names it (128 + signal to a
// shell, WTERMSIG to a parent). Without this a crashed node leaves an empty
// log and only an exit code (CI once saw a woken worker exit that way).
//
// Covers SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT (std::terminate's
// message comes first, then this report) in any thread that does not block
// them (ZeroMQ's I/O threads block every signal: a fault there still kills
// the process, without a report). On the installing thread the handler runs
// on an alternate stack, so a stack overflow there is reported too; other
// threads overflow silently, as before. It writes with write(2) and walks
// the stack with glibc's backtrace (loaded here, before any fault), which is
// not async-signal-safe: a fault inside the unwinder could block it, so the
// handler first sets alarm(5), whose default action ends the process.
//
// Signal dispositions belong to the whole process: the programs' main()
// installs this once (common/node/node_cli.h, guarded_main), libraries never do.
#pragma once

namespace pstrain {

// `program` (kept, at most 63 characters) prefixes the report.
void install_fatal_signal_report(const char* program);

}  // namespace pstrain
