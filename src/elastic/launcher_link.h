// LauncherLink: the worker side of the worker <-> edl-run contract that is not the store.
//
// 1. Launcher liveness. edl-run hands every worker the read end of a pipe whose write end only
//    edl-run holds (EDL_LAUNCHER_FD). When edl-run dies — even by kill -9 — the kernel closes the
//    write end and the read end reports EOF; the link thread then prints one line and ends the
//    process at once (_exit). This complements PR_SET_PDEATHSIG, which edl-run sets in the child
//    but which the kernel clears for the worker's own children (e.g. PROGRAM is a shell script that
//    runs the trainer): the fd is inherited, so every process of the worker is covered.
// 2. SIGTERM = graceful leave. The handler (SA_RESTART) only writes one byte to a self-pipe; the
//    link thread then asks the `on_sigterm` callback (under a mutex, so a worker being reset or
//    destroyed is never touched after it is gone). The callback returns false when no run() is in
//    progress: the link then restores the previous disposition and re-raises SIGTERM, so the
//    process behaves as if EDL had never installed a handler. uninstall restores the previous
//    handler.
// Thread-safety: install/uninstall from any thread (serialized internally); the callback runs on
// the link thread.
#pragma once

#include <functional>

#include "common/config.h"

namespace edl::elastic {

// Starts the link thread (once per process; later calls only update the callback), watches
// config.launcher_fd when it is >= 0 and installs the SIGTERM handler.
// on_sigterm: returns true when it turned SIGTERM into a graceful leave.
void install_launcher_link(const Config& config, std::function<bool()> on_sigterm);

// Restores the SIGTERM disposition that install found and drops the callback. The liveness watch
// stays (a worker outliving its launcher is wrong in any phase).
void uninstall_launcher_link();

}  // namespace edl::elastic
