# Helpers that give every cohort library, tool and test the same warnings and layout.
#   cohort_library(NAME SOURCES ... [PUBLIC_LIBS ...] [PRIVATE_LIBS ...])
#   cohort_tool(NAME SOURCES ... LIBS ...)
#   cohort_test(NAME SOURCES ... LIBS ... [LABELS ...] [TIMEOUT s])

set(COHORT_WARNINGS -Wall -Wextra)
if(COHORT_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
endif()

if(COHORT_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "COHORT_FUZZ needs clang (libFuzzer); configure with CXX=clang++ CC=clang")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
                      -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
endif()

function(cohort_library name)
  cmake_parse_arguments(L "" "" "SOURCES;PUBLIC_LIBS;PRIVATE_LIBS" ${ARGN})
  add_library(${name} STATIC ${L_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_compile_options(${name} PRIVATE ${COHORT_WARNINGS})
  target_link_libraries(${name} PUBLIC ${L_PUBLIC_LIBS} PRIVATE ${L_PRIVATE_LIBS})
endfunction()

function(cohort_tool name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_compile_options(${name} PRIVATE ${COHORT_WARNINGS})
  target_link_libraries(${name} PRIVATE ${T_LIBS})
endfunction()

function(cohort_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_compile_options(${name} PRIVATE ${COHORT_WARNINGS})
  target_link_libraries(${name} PRIVATE cohort_test_main ${T_LIBS})
  add_test(NAME ${name} COMMAND ${name} --order rand --warn NoAssertions)
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 600)
  endif()
  # OPENBLAS_NUM_THREADS=1: tests run several ranks as threads of one process, which share
  # OpenBLAS's one pool; a pool per core spins in sched_yield between their calls and slows a
  # loaded 2-core machine several times over.
  set_tests_properties(${name} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "${T_LABELS}"
    ENVIRONMENT "COHORT_SHARED=${PROJECT_SOURCE_DIR}/../shared;COHORT_SHARED_COPY=${PROJECT_SOURCE_DIR}/tests/shared;COHORT_BIN=${PROJECT_BINARY_DIR}/bin;OPENBLAS_NUM_THREADS=1")
endfunction()
