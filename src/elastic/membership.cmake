# Worker-side elastic runtime (owner: elastic-runtime engineer): rendezvous, liveness, state, run loop.
target_sources(edl PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/snapshot.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/checkpoint.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/state.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/liveness.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/silence.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/membership.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/membership_rendezvous.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/straggler.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/step_observer.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/worker.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/worker_observe.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/generation_change.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/api.cc)
