# libtorch from PyTorch installed from the Python package index: the python3 of
# the environment that scripts/install-deps.sh makes (one pinned torch, in a
# machine-wide cache folder), or any python3 with torch 2.x named by
# -DHPCT_TORCH_PYTHON=... (`pip install ./python` passes the one it runs under).
# The build finds libtorch's CMake files through torch.utils.cmake_prefix_path.
if(NOT HPCT_TORCH_PYTHON)
  execute_process(COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/install-deps.sh --print-python
    OUTPUT_VARIABLE _hpct_default_python OUTPUT_STRIP_TRAILING_WHITESPACE)
  set(HPCT_TORCH_PYTHON ${_hpct_default_python} CACHE FILEPATH
    "The python3 whose torch (libtorch, torch_python) hpctrain builds against")
endif()
execute_process(
  COMMAND ${HPCT_TORCH_PYTHON} -c "import sys, sysconfig, torch, torch.utils; print(torch.utils.cmake_prefix_path); print(torch.__version__); print(int(torch.compiled_with_cxx11_abi())); print(sysconfig.get_config_var('EXT_SUFFIX')); print('%d.%d' % sys.version_info[:2]); print(sysconfig.get_paths()['include']); print(torch.version.cuda or '')"
  OUTPUT_VARIABLE _hpct_torch_out ERROR_VARIABLE _hpct_torch_err RESULT_VARIABLE _hpct_torch_rc
  OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _hpct_torch_rc EQUAL 0)
  message(FATAL_ERROR "hpctrain needs PyTorch 2.x: ${HPCT_TORCH_PYTHON} cannot import torch "
    "(${_hpct_torch_err}). Run scripts/install-deps.sh (as root), which installs it into "
    "the machine-wide cache folder, or pass -DHPCT_TORCH_PYTHON=/path/to/python3 with torch.")
endif()
string(REPLACE "\n" ";" _hpct_torch_out "${_hpct_torch_out}")
list(GET _hpct_torch_out 0 HPCT_TORCH_CMAKE_PREFIX)
list(GET _hpct_torch_out 1 HPCT_TORCH_VERSION)
list(GET _hpct_torch_out 2 HPCT_TORCH_CXX11_ABI)
list(GET _hpct_torch_out 3 HPCT_PY_EXT_SUFFIX)
list(GET _hpct_torch_out 4 HPCT_PY_VERSION)
list(GET _hpct_torch_out 5 HPCT_PY_INCLUDE)
list(LENGTH _hpct_torch_out _hpct_n)
set(HPCT_TORCH_CUDA "")
if(_hpct_n GREATER 6)
  list(GET _hpct_torch_out 6 HPCT_TORCH_CUDA)
endif()
if(HPCT_TORCH_VERSION VERSION_LESS 2.0)
  message(FATAL_ERROR "hpctrain needs PyTorch 2.x; ${HPCT_TORCH_PYTHON} has torch ${HPCT_TORCH_VERSION}. "
    "Run scripts/install-deps.sh, or pass -DHPCT_TORCH_PYTHON=/path/to/python3 with torch 2.x.")
endif()
# A CUDA build of torch needs the CUDA toolkit to configure (nvcc, cuDNN, NCCL):
# /usr/local/cuda where no other is named.
if(HPCT_TORCH_CUDA AND NOT CUDAToolkit_ROOT AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CUDAToolkit_ROOT /usr/local/cuda)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc CACHE FILEPATH "")
endif()
if(HPCT_TORCH_CUDA)
  # torch picks the GPU architectures from TORCH_CUDA_ARCH_LIST and warns when
  # CMake's own CMAKE_CUDA_ARCHITECTURES (set by enabling CUDA) is defined.
  enable_language(CUDA)
  unset(CMAKE_CUDA_ARCHITECTURES CACHE)
  unset(CMAKE_CUDA_ARCHITECTURES)
  if(NOT TORCH_CUDA_ARCH_LIST)
    set(TORCH_CUDA_ARCH_LIST "8.0;9.0")  # A100, H100/H200
  endif()
endif()
# The wheel carries no libkineto.a (the profiler is inside libtorch_cpu), and
# TorchConfig warns when it finds none: name the library that has it.
find_library(kineto_LIBRARY torch_cpu PATHS "${HPCT_TORCH_CMAKE_PREFIX}/../../lib" NO_DEFAULT_PATH)
list(APPEND CMAKE_PREFIX_PATH ${HPCT_TORCH_CMAKE_PREFIX})
find_package(Torch REQUIRED)
message(STATUS "hpctrain: torch ${HPCT_TORCH_VERSION} (CUDA ${HPCT_TORCH_CUDA}) from ${HPCT_TORCH_PYTHON}")
# torch's directory of libraries, for the rpath of what links it and for torch_python.
get_filename_component(HPCT_TORCH_LIB_DIR "${TORCH_LIBRARY}" DIRECTORY)

# hpctrain's programs and libraries use torch's CPU library (libtorch_cpu and
# libc10), with torch's compile settings (C++20, its definitions), not
# libtorch_cuda: they then run where those two and their few dependencies are
# installed, which the Debian package carries (cmake/Packaging.cmake).
# TORCH_LIBRARIES names this target from here on.
add_library(hpct_libtorch INTERFACE)
target_link_libraries(hpct_libtorch INTERFACE torch_cpu_library c10)
target_include_directories(hpct_libtorch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
target_compile_features(hpct_libtorch INTERFACE cxx_std_20)
if(TORCH_CXX_FLAGS)
  separate_arguments(_hpct_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
  target_compile_options(hpct_libtorch INTERFACE ${_hpct_torch_flags})
endif()
set(TORCH_LIBRARIES hpct_libtorch)
# The CUDA libraries that came with torch from the index (NCCL, cuSPARSELt,
# NVSHMEM, cuFile) are found through libtorch's own rpath when a program runs;
# the linker must look there too, before the older ones of the CUDA toolkit.
file(GLOB _hpct_nvidia_libs LIST_DIRECTORIES true "${HPCT_TORCH_LIB_DIR}/../../nvidia/*/lib")
string(JOIN ":" _hpct_rpath_link ${HPCT_TORCH_LIB_DIR} ${_hpct_nvidia_libs})
add_link_options("LINKER:-rpath-link,${_hpct_rpath_link}")
