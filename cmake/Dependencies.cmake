# Finds every third-party dependency. All of them come from Debian's packages;
# tools/install_deps.sh installs the ones that are missing.
find_package(Threads REQUIRED)
find_package(cppzmq REQUIRED)          # brings libzmq (cppzmq-dev, libzmq3-dev)
find_package(cereal REQUIRED)          # libcereal-dev
find_package(doctest REQUIRED)         # doctest-dev
find_package(tomlplusplus REQUIRED)    # libtomlplusplus-dev
find_package(CLI11 REQUIRED)           # libcli11-dev
find_package(ZLIB REQUIRED)            # zlib1g-dev
find_package(PkgConfig REQUIRED)       # pkg-config
pkg_check_modules(SODIUM REQUIRED IMPORTED_TARGET libsodium)  # libsodium-dev: the job secret (HMAC-SHA256)
find_package(dnnl REQUIRED)            # libdnnl-dev (oneDNN)
find_package(Gloo CONFIG)              # libgloo-dev (CPU allreduce); optional
set(BLA_VENDOR OpenBLAS)
find_package(BLAS REQUIRED)            # libopenblas-dev
find_path(PSTRAIN_CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas-pthread openblas)

# ---- CUDA (optional) ---------------------------------------------------------
set(PSTRAIN_HAVE_CUDA OFF)
set(PSTRAIN_HAVE_NCCL OFF)
set(PSTRAIN_HAVE_CUDNN OFF)
if(NOT PSTRAIN_CUDA STREQUAL "OFF")
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # Hopper (sm_90) plus one older architecture (Ampere, sm_80).
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 90)
    endif()
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)  # CMake 3.25 knows no CUDA20 flags for nvcc
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(PSTRAIN_HAVE_CUDA ON)
    find_path(PSTRAIN_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    find_library(PSTRAIN_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib)
    if(PSTRAIN_NCCL_INCLUDE_DIR AND PSTRAIN_NCCL_LIBRARY)
      set(PSTRAIN_HAVE_NCCL ON)
    endif()
    # cuDNN 9 (the toolkit's copy here; PyTorch's on the GPU machine at run time).
    if(NOT PSTRAIN_CUDNN STREQUAL "OFF")
      find_path(PSTRAIN_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
      find_library(PSTRAIN_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib)
      if(PSTRAIN_CUDNN_INCLUDE_DIR AND PSTRAIN_CUDNN_LIBRARY)
        set(PSTRAIN_HAVE_CUDNN ON)
      elseif(PSTRAIN_CUDNN STREQUAL "ON")
        message(FATAL_ERROR "PSTRAIN_CUDNN=ON but cudnn.h or libcudnn was not found with the CUDA toolkit")
      endif()
    endif()
  elseif(PSTRAIN_CUDA STREQUAL "ON")
    message(FATAL_ERROR "PSTRAIN_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
message(STATUS "pstrain: CUDA backend ${PSTRAIN_HAVE_CUDA}, cuDNN ${PSTRAIN_HAVE_CUDNN}, NCCL ${PSTRAIN_HAVE_NCCL}, Gloo ${Gloo_FOUND}")
