#include "engine/device.h"

#include "core/error.h"

namespace hpct::engine {

std::string Device::str() const {
  return std::string(kind() == DeviceKind::kCuda ? "cuda:" : "cpu-device:") + std::to_string(index());
}

void Device::cast_to_16_async(const float*, std::uint16_t*, std::size_t, comm::DataType, Stream) {
  throw_invalid_argument(str() + " cannot cast float32 to 16 bits on the device");
}

void Device::cast_from_16_async(const std::uint16_t*, float*, std::size_t, comm::DataType, float, Stream) {
  throw_invalid_argument(str() + " cannot cast 16 bits to float32 on the device");
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ == nullptr) return;
  if (host_) {
    device_.free_host(data_);
  } else {
    device_.free(data_);
  }
}

void* DeviceBuffer::reserve(std::size_t bytes) {
  if (data_ != nullptr && bytes <= capacity_) return data_;
  const std::size_t rounded = (bytes + 255) / 256 * 256;
  void* p = host_ ? device_.allocate_host(rounded == 0 ? 256 : rounded)
                  : device_.allocate(rounded == 0 ? 256 : rounded);
  if (data_ != nullptr) {
    if (host_) {
      device_.free_host(data_);
    } else {
      device_.free(data_);
    }
  }
  data_ = p;
  capacity_ = rounded;
  return p;
}

}  // namespace hpct::engine
