# Job metrics (docs/observability.md): the worker side in libedl (counters, the reporter thread, the
# store latency wrapper) and edl-run's side (the collector, the Prometheus endpoint, the CSV file and
# the goodput report). Included after launcher.cmake, which defines edl-run.
target_sources(edl PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/worker_metrics.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/timed_store.cc)
target_sources(edl-run PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/launcher/job_metrics.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/launcher/metrics_exposition.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/launcher/goodput_report.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/launcher/metrics_service.cc)
target_link_libraries(edl-run PRIVATE PkgConfig::CPPHTTPLIB nlohmann_json::nlohmann_json)
