# One case of the layering check's own test: a copy of the repository's src/,
# include/ and apps/ with one file added (PROBE, relative to the copy, holding
# the line INCLUDE), checked with cmake/check_layering.cmake. Without PROBE the
# copy must pass; with it the check must fail and say EXPECT (a regex).
# cmake -DROOT=<repo> -DWORK=<dir> [-DPROBE=apps/rotor/x.cc -DINCLUDE=ops/matmul.h
#       -DEXPECT=<regex>] -P layering_case.cmake
foreach(v ROOT WORK)
  if(NOT ${v})
    message(FATAL_ERROR "layering_case: pass -D${v}=")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
foreach(dir src include apps)
  file(COPY ${ROOT}/${dir} DESTINATION ${WORK} FILES_MATCHING PATTERN "*.h" PATTERN "*.cc"
       PATTERN "CMakeLists.txt")
endforeach()
if(PROBE)
  file(WRITE ${WORK}/${PROBE} "#include \"${INCLUDE}\"\n")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -DROOT=${WORK} -P ${ROOT}/cmake/check_layering.cmake
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(out "${out}${err}")
if(NOT PROBE)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "layering_case: the unchanged copy fails the check:\n${out}")
  endif()
  message(STATUS "layering_case: the unchanged copy passes")
  return()
endif()
if(rc EQUAL 0)
  message(FATAL_ERROR "layering_case: ${PROBE} including ${INCLUDE} passed the check:\n${out}")
endif()
if(NOT out MATCHES "${EXPECT}")
  message(FATAL_ERROR "layering_case: the check failed, but without '${EXPECT}':\n${out}")
endif()
message(STATUS "layering_case: ${PROBE} including ${INCLUDE} fails as expected")
