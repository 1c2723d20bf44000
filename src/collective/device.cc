// The device-plugin registry (collective/device.h).
#include "collective/device.h"

#include <mutex>

namespace edl::collective {
namespace {

std::mutex g_mu;
std::shared_ptr<DevicePlugin> g_plugin;

}  // namespace

DeviceRequest::~DeviceRequest() = default;
DeviceBackend::~DeviceBackend() = default;
DevicePlugin::~DevicePlugin() = default;

void set_device_plugin(std::shared_ptr<DevicePlugin> plugin) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_plugin = std::move(plugin);
}

std::shared_ptr<DevicePlugin> device_plugin() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_plugin;
}

}  // namespace edl::collective
