# Finds every third-party dependency once and exposes each as an imported target.
# CAF 0.17 ships no CMake config, so it gets an imported target here (SYSTEM: its headers warn).

find_package(Threads REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(Boost REQUIRED COMPONENTS program_options)
find_package(cppzmq REQUIRED)
find_package(msgpack REQUIRED CONFIG NAMES msgpack msgpackc-cxx msgpack-cxx)
find_package(Catch2 2 REQUIRED)
find_package(Torch REQUIRED)
find_package(Gloo CONFIG)
find_package(PkgConfig REQUIRED)
pkg_check_modules(SENTENCEPIECE REQUIRED IMPORTED_TARGET sentencepiece)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(SODIUM REQUIRED IMPORTED_TARGET libsodium)
pkg_check_modules(ICU REQUIRED IMPORTED_TARGET icu-uc)
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)

find_path(CAF_INCLUDE_DIR caf/all.hpp REQUIRED)
find_library(CAF_CORE_LIBRARY caf_core REQUIRED)
find_library(CAF_IO_LIBRARY caf_io REQUIRED)
add_library(cohort_caf INTERFACE)
target_include_directories(cohort_caf SYSTEM INTERFACE ${CAF_INCLUDE_DIR})
target_link_libraries(cohort_caf INTERFACE ${CAF_CORE_LIBRARY} ${CAF_IO_LIBRARY} Threads::Threads)

# Torch's exported flags (and its own include dirs) as one interface target, marked SYSTEM so
# libtorch's headers do not trip -Wextra.
add_library(cohort_torch INTERFACE)
target_include_directories(cohort_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
target_link_libraries(cohort_torch INTERFACE ${TORCH_LIBRARIES})
target_compile_options(cohort_torch INTERFACE ${TORCH_CXX_FLAGS})

if(COHORT_CUDA STREQUAL "auto")
  if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES)
    set(COHORT_CUDA ON)
  else()
    set(COHORT_CUDA OFF)
  endif()
endif()
message(STATUS "cohort: CUDA backends ${COHORT_CUDA}")

# PyTorch's CUDA wheels (2.5 on) link parts of libstdc++ statically and export them: libtorch.so
# and libtorch_cpu.so define std::filesystem (pytorch/pytorch#133437). With libtorch ahead of
# libstdc++ in a program's DT_NEEDED, the dynamic linker binds the program's own std::filesystem
# calls to those copies, which crash (remove_all jumps to address 0). Naming libstdc++ before
# every object and library (by its path: a bare -lstdc++ may find the static archive first) puts
# it first in the lookup order, so those calls bind to libstdc++. Not with the sanitizers, whose
# runtime must stay first.
if(COHORT_CUDA AND NOT COHORT_SANITIZE)
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libstdc++.so.6
                  OUTPUT_VARIABLE cohort_libstdcxx OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(IS_ABSOLUTE "${cohort_libstdcxx}" AND EXISTS "${cohort_libstdcxx}")
    message(STATUS "cohort: ${cohort_libstdcxx} linked ahead of libtorch")
    target_link_options(cohort_torch INTERFACE
                        "LINKER:--push-state,--no-as-needed,${cohort_libstdcxx},--pop-state")
  else()
    message(WARNING "cohort: ${CMAKE_CXX_COMPILER} names no shared libstdc++.so.6; programs may "
                    "bind std::filesystem to pip libtorch's copies and crash")
  endif()
endif()

# The same wheels export their own, newer Gloo too (libtorch_cpu.so defines gloo::Context and the
# rest). cohort is compiled against the system Gloo's headers; with libtorch first in the lookup
# order its calls bind to torch's copy, whose classes have another layout, and a job on CPU
# workers crashes in its first collective (a call through a null pointer under
# gloo::Context::createUnboundBuffer). Naming libgloo's file first as well binds them to the Gloo
# they were compiled against.
if(COHORT_CUDA AND NOT COHORT_SANITIZE AND TARGET gloo)
  get_target_property(cohort_gloo_file gloo LOCATION)
  if(cohort_gloo_file AND EXISTS "${cohort_gloo_file}")
    message(STATUS "cohort: ${cohort_gloo_file} linked ahead of libtorch")
    target_link_options(cohort_torch INTERFACE
                        "LINKER:--push-state,--no-as-needed,${cohort_gloo_file},--pop-state")
  else()
    message(WARNING "cohort: the gloo target names no library file; CPU collectives may bind to "
                    "pip libtorch's Gloo and crash")
  endif()
endif()
