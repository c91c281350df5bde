# Included right after project(dashattn) when the Python package is built (pyproject.toml names this file as
# CMAKE_PROJECT_dashattn_INCLUDE), i.e. before the DASHATTN_* options are declared: a cache value set here wins
# over the option's default, and an explicit -D or the environment wins over the detection.
#
# `pip install .` must work on a machine without CUDA and must pick up the CUDA backend where nvcc exists, with
# no flags in either case.
if(DEFINED ENV{DASHATTN_WITH_CUDA} AND NOT "$ENV{DASHATTN_WITH_CUDA}" STREQUAL "")
  set(DASHATTN_WITH_CUDA "$ENV{DASHATTN_WITH_CUDA}" CACHE BOOL "Build the CUDA backend (needs nvcc)" FORCE)
elseif(NOT DEFINED DASHATTN_WITH_CUDA)
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    message(STATUS "dashattn (Python build): nvcc found at ${CMAKE_CUDA_COMPILER}, building the CUDA backend")
    set(DASHATTN_WITH_CUDA ON CACHE BOOL "Build the CUDA backend (needs nvcc)")
  else()
    message(STATUS "dashattn (Python build): no CUDA compiler found, building the CPU backend only")
    set(DASHATTN_WITH_CUDA OFF CACHE BOOL "Build the CUDA backend (needs nvcc)")
  endif()
endif()

foreach(_var DASHATTN_WITH_CPU DASHATTN_CUDA_ARCHITECTURES)
  if(DEFINED ENV{${_var}} AND NOT "$ENV{${_var}}" STREQUAL "")
    set(${_var} "$ENV{${_var}}" CACHE STRING "set from the environment by the Python build" FORCE)
  endif()
endforeach()
