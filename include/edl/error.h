// The one error scheme of EDL (see docs/errors.md).
//
// Every failure EDL reports is an exception derived from edl::Error. The classes say what the caller
// should do next, not where the failure happened:
//
//   InvalidArgument      the caller did something wrong (bad size, bad flag, bad dtype); fix the call.
//     MismatchError      ranks called the same collective with different count / dtype / op / root.
//   DataError            a dataset or checkpoint file is missing, truncated, corrupt or out of range.
//   CommError            the communicator of this generation is unusable; it is never used again.
//     PeerLostError      a peer died or its connection dropped (socket error, EOF).
//     TimeoutError       the collective deadline passed (a peer hung, e.g. SIGSTOP, or a partition).
//     AbortedError       some thread or rank aborted this generation (e.g. a failure seen elsewhere).
//   MembershipChanged    not a failure: a join or graceful leave is pending at this batch boundary;
//                        the elastic loop commits, re-rendezvouses and continues.
//   StoreError           the control-plane store failed (connection lost, timeout, auth rejected).
//     AuthError          the job secret was wrong or missing.
//   JobError             the elastic job cannot go on (below min workers too long, reset limit hit).
//   InternalError        an EDL invariant broke: a bug; please report it.
//
// Thread-safety: exception objects are immutable values.
#pragma once

#include <stdexcept>
#include <string>

#include "edl/export.h"

namespace edl {

class EDL_API Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

class EDL_API InvalidArgument : public Error {
 public:
  using Error::Error;
};

class EDL_API MismatchError : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

class EDL_API DataError : public Error {
 public:
  using Error::Error;
};

class EDL_API CommError : public Error {
 public:
  using Error::Error;
};

class EDL_API PeerLostError : public CommError {
 public:
  using CommError::CommError;
};

class EDL_API TimeoutError : public CommError {
 public:
  using CommError::CommError;
};

class EDL_API AbortedError : public CommError {
 public:
  using CommError::CommError;
};

class EDL_API MembershipChanged : public Error {
 public:
  using Error::Error;
};

class EDL_API StoreError : public Error {
 public:
  using Error::Error;
};

class EDL_API AuthError : public StoreError {
 public:
  using StoreError::StoreError;
};

class EDL_API JobError : public Error {
 public:
  using Error::Error;
};

class EDL_API InternalError : public Error {
 public:
  using Error::Error;
};

}  // namespace edl

// EDL_CHECK(cond, ExceptionType, message-expression): throw ExceptionType(message) unless cond.
#define EDL_CHECK(cond, Type, msg)   \
  do {                               \
    if (!(cond)) throw Type(msg);    \
  } while (0)

// EDL_ASSERT(cond): an invariant of EDL itself; failing it is a bug (InternalError with location).
#define EDL_ASSERT(cond)                                                                      \
  do {                                                                                        \
    if (!(cond))                                                                              \
      throw ::edl::InternalError(std::string("EDL invariant failed: " #cond " at ") +         \
                                 __FILE__ + ":" + std::to_string(__LINE__));                  \
  } while (0)
