cmake_minimum_required(VERSION 3.25)
# Keeps ENGINEERING.md's layering honest. Three rules, on `#include "module/..."`:
# - src: a module under src/ includes only headers of the modules it links
#   (directly or transitively), read from the rotor_* names in its CMakeLists.txt.
# - include: the public headers (include/rotor/) include no module header.
# - apps: code under apps/ includes only the public API (include/rotor/), the
#   modules in apps_modules, and the headers in apps_headers below.
# Run: cmake -DROOT=<repo> -P cmake/check_layering.cmake
# (ctest test `layering`, registered in tests/CMakeLists.txt, so `make test`;
# tests/layering/ checks that each rule fails on a file that breaks it.)
if(NOT ROOT)
  message(FATAL_ERROR "check_layering: pass -DROOT=<repo>")
endif()

# The apps rule. apps/ links rotor_engine, which links every module, so this is
# policy rather than something CMake enforces: apps/ parses arguments and
# prints, and everything it runs is a module meant for it. Whole modules:
# base (Status, timers, RSS, logging), sampling (SamplingParams), grammar
# (the grammars and JSON schemas SamplingParams carries), engine
# (sessions, scheduler, prompt cache), eval (perplexity studies) and
# bench_runner (`rotor bench`), kv_args (KV options as flags and JSON
# fields) and server (`rotor serve`). Of the other modules only the types the
# engine's interface hands out and the offline tools (the KV configuration
# and its lists come through kv_args): the model quantizer and synthesizer, GGUF reading for `info`, the
# chat template (tokenize and detokenize use the C API). Never kernels (ops, attention), tensors, or the
# model's and cache's internals (forward, weights, cells, policies): a file
# under apps/ that needs one is code for a module.
# A listed header that no file under apps/ includes is an error too, so the
# list cannot outlive its reason.
set(apps_modules base sampling grammar engine eval bench_runner kv_args server)
set(apps_headers
    gguf/gguf.h gguf/gguf_info.h
    model/quantize.h model/synth.h
    tokenizer/chat_template.h)
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

# include/: the public API stands alone.
file(GLOB_RECURSE public_headers ${ROOT}/include/*.h)
foreach(src ${public_headers})
  file(STRINGS ${src} includes REGEX "^#include \"[a-z_]+/")
  foreach(line ${includes})
    string(REGEX REPLACE "^#include \"([a-z_]+)/.*" "\\1" inc ${line})
    if(inc IN_LIST modules)
      file(RELATIVE_PATH rel ${ROOT} ${src})
      message(SEND_ERROR "layering [include rule]: ${rel} includes '${inc}/...': the public API "
                         "includes no module header")
      math(EXPR errors "${errors} + 1")
    endif()
  endforeach()
endforeach()

# apps/
foreach(m ${apps_modules})
  if(NOT m IN_LIST modules)
    message(SEND_ERROR "layering [apps rule]: apps_modules names '${m}', which is not a module under src/")
    math(EXPR errors "${errors} + 1")
  endif()
endforeach()
list(JOIN apps_modules ", " apps_modules_text)
set(apps_headers_used "")
file(GLOB_RECURSE app_sources ${ROOT}/apps/*.h ${ROOT}/apps/*.cc)
foreach(src ${app_sources})
  file(RELATIVE_PATH rel ${ROOT} ${src})
  file(STRINGS ${src} includes REGEX "^#include \"[a-z_]+/")
  foreach(line ${includes})
    string(REGEX REPLACE "^#include \"([a-z_]+)/.*" "\\1" inc ${line})
    string(REGEX REPLACE "^#include \"([^\"]+)\".*" "\\1" header ${line})
    if(NOT inc IN_LIST modules OR inc IN_LIST apps_modules)
      continue()
    endif()
    if(header IN_LIST apps_headers)
      list(APPEND apps_headers_used ${header})
      continue()
    endif()
    message(SEND_ERROR "layering [apps rule]: ${rel} includes '${header}', but apps/ may include "
                       "only the public API, the modules ${apps_modules_text}, and the headers in "
                       "apps_headers (cmake/check_layering.cmake); kernels and model or cache "
                       "internals belong in a module")
    math(EXPR errors "${errors} + 1")
  endforeach()
endforeach()
foreach(header ${apps_headers})
  if(NOT header IN_LIST apps_headers_used)
    message(SEND_ERROR "layering [apps rule]: apps_headers lists ${header}, which no file under "
                       "apps/ includes: remove it from the list")
    math(EXPR errors "${errors} + 1")
  endif()
endforeach()

if(errors GREATER 0)
  message(FATAL_ERROR "layering: ${errors} violation(s)")
endif()
list(LENGTH modules n)
list(LENGTH app_sources n_apps)
list(LENGTH public_headers n_public)
message(STATUS "layering: ${n} modules, ${n_public} public headers and ${n_apps} files under apps/, no violations")
