cmake_minimum_required(VERSION 3.25)
# Keeps ENGINEERING.md's layering honest. Two rules, on `#include "module/..."`:
# - src: a module under src/ includes only headers of the modules it links
#   (directly or transitively), read from the rotor_* names in its CMakeLists.txt.
# - apps: code under apps/ includes only headers of the modules in
#   apps_allowed below (ops only from the files in apps_ops_exceptions).
# Run: cmake -DROOT=<repo> -P cmake/check_layering.cmake
# (ctest test `layering`, registered in tests/CMakeLists.txt, so `make test`.)
if(NOT ROOT)
  message(FATAL_ERROR "check_layering: pass -DROOT=<repo>")
endif()

# The apps rule. apps/ links rotor_engine, which links every module, so this is
# policy rather than something CMake enforces: the CLI and the server are built
# on engine and on the types its interface hands out (kv: KvConfig; model:
# Model, Forward, synth, quantize; tokenizer; gguf: info, quantize's input;
# base: Status, timers, RSS; tensor: DType; sampling: SamplingParams; grammar:
# the grammars and JSON schemas SamplingParams carries).
# Not attention (internal to the forward pass) and not ops (kernels).
set(apps_allowed engine kv model tokenizer gguf base tensor sampling grammar)
# The one exception: `rotor bench` measures the kernels themselves, so these
# files may include ops/ headers (bench_config.cc reports which matrices
# ops::PackingHelps packs; roofline.cc times ops::Matmul as its compute probe).
# Paths relative to the repository. A listed file that no longer includes
# ops/ is an error too, so the list cannot outlive its reason.
set(apps_ops_exceptions apps/rotor/bench_config.cc apps/rotor/roofline.cc)
file(GLOB module_dirs LIST_DIRECTORIES true ${ROOT}/src/*)
set(modules "")
foreach(dir ${module_dirs})
  if(IS_DIRECTORY ${dir} AND EXISTS ${dir}/CMakeLists.txt)
    get_filename_component(m ${dir} NAME)
    list(APPEND modules ${m})
    file(READ ${dir}/CMakeLists.txt cml)
    string(REGEX MATCHALL "rotor_[a-z_]+" deps "${cml}")
    set(direct_${m} "")
    foreach(d ${deps})
      string(REGEX REPLACE "^rotor_" "" d ${d})
      if(NOT d STREQUAL m AND NOT d STREQUAL "module")
        list(APPEND direct_${m} ${d})
      endif()
    endforeach()
  endif()
endforeach()

# Transitive closure.
foreach(m ${modules})
  set(allowed_${m} ${m})
  set(queue ${direct_${m}})
  while(queue)
    list(POP_FRONT queue d)
    if(NOT d IN_LIST allowed_${m})
      list(APPEND allowed_${m} ${d})
      list(APPEND queue ${direct_${d}})
    endif()
  endwhile()
endforeach()

set(errors 0)
foreach(m ${modules})
  file(GLOB_RECURSE sources ${ROOT}/src/${m}/*.h ${ROOT}/src/${m}/*.cc)
  foreach(src ${sources})
    file(STRINGS ${src} includes REGEX "^#include \"[a-z_]+/")
    foreach(line ${includes})
      string(REGEX REPLACE "^#include \"([a-z_]+)/.*" "\\1" inc ${line})
      if(inc IN_LIST modules AND NOT inc IN_LIST allowed_${m})
        file(RELATIVE_PATH rel ${ROOT} ${src})
        message(SEND_ERROR "layering [src rule]: ${rel} includes '${inc}/...' but module '${m}' does not link rotor_${inc}")
        math(EXPR errors "${errors} + 1")
      endif()
    endforeach()
  endforeach()
endforeach()

# apps/
foreach(m ${apps_allowed})
  if(NOT m IN_LIST modules)
    message(SEND_ERROR "layering [apps rule]: apps_allowed names '${m}', which is not a module under src/")
    math(EXPR errors "${errors} + 1")
  endif()
endforeach()
list(JOIN apps_allowed ", " apps_allowed_text)
set(apps_ops_used "")
file(GLOB_RECURSE app_sources ${ROOT}/apps/*.h ${ROOT}/apps/*.cc)
foreach(src ${app_sources})
  file(RELATIVE_PATH rel ${ROOT} ${src})
  file(STRINGS ${src} includes REGEX "^#include \"[a-z_]+/")
  foreach(line ${includes})
    string(REGEX REPLACE "^#include \"([a-z_]+)/.*" "\\1" inc ${line})
    if(NOT inc IN_LIST modules OR inc IN_LIST apps_allowed)
      continue()
    endif()
    if(inc STREQUAL "ops" AND rel IN_LIST apps_ops_exceptions)
      list(APPEND apps_ops_used ${rel})
      continue()
    endif()
    message(SEND_ERROR "layering [apps rule]: ${rel} includes '${inc}/...' but apps/ may include only "
                       "${apps_allowed_text} (ops only from apps_ops_exceptions in "
                       "cmake/check_layering.cmake)")
    math(EXPR errors "${errors} + 1")
  endforeach()
endforeach()
foreach(rel ${apps_ops_exceptions})
  if(NOT rel IN_LIST apps_ops_used)
    message(SEND_ERROR "layering [apps rule]: apps_ops_exceptions lists ${rel}, which does not include "
                       "ops/ (or does not exist): remove it from the list")
    math(EXPR errors "${errors} + 1")
  endif()
endforeach()

if(errors GREATER 0)
  message(FATAL_ERROR "layering: ${errors} violation(s)")
endif()
list(LENGTH modules n)
list(LENGTH app_sources n_apps)
message(STATUS "layering: ${n} modules and ${n_apps} files under apps/, no violations")
