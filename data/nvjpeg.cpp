// nvJPEG presence: the build links the CUDA toolkit's GPU JPEG decoder when found (cmake/nvjpeg.cmake);
// the batched device decode that would feed the loader's crops is not written yet.
#include "data/jpeg.h"

#ifdef MPX_WITH_NVJPEG
#include <nvjpeg.h>
#endif

namespace mpx::data {

#ifdef MPX_WITH_NVJPEG
bool have_nvjpeg() {
  // Linked is not enough: the library must load and answer (a driver may be missing at run time).
  int major = 0;
  return nvjpegGetProperty(MAJOR_VERSION, &major) == NVJPEG_STATUS_SUCCESS && major > 0;
}
#endif

}  // namespace mpx::data
