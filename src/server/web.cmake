# The chat page (web/) compiled into the binary: rotor_web holds the files'
# bytes and their lookup (web.h); the server answers GET / with them.
set(ROTOR_WEB_FILES index.html chat.css chat.js)
set(ROTOR_WEB_DIR ${PROJECT_SOURCE_DIR}/web)
set(ROTOR_WEB_CC ${CMAKE_CURRENT_BINARY_DIR}/web_files.cc)
list(TRANSFORM ROTOR_WEB_FILES PREPEND ${ROTOR_WEB_DIR}/ OUTPUT_VARIABLE ROTOR_WEB_PATHS)
string(REPLACE ";" "," ROTOR_WEB_FILES_ARG "${ROTOR_WEB_FILES}")  # a shell word
add_custom_command(OUTPUT ${ROTOR_WEB_CC}
  COMMAND ${CMAKE_COMMAND} -DOUT=${ROTOR_WEB_CC} -DROOT=${ROTOR_WEB_DIR}
          -DFILES=${ROTOR_WEB_FILES_ARG} -P ${PROJECT_SOURCE_DIR}/cmake/embed_files.cmake
  DEPENDS ${ROTOR_WEB_PATHS} ${PROJECT_SOURCE_DIR}/cmake/embed_files.cmake
  COMMENT "Embedding the chat page (web/)" VERBATIM)
add_library(rotor_web STATIC web.cc ${ROTOR_WEB_CC})
target_include_directories(rotor_web PUBLIC ${PROJECT_SOURCE_DIR}/src)
