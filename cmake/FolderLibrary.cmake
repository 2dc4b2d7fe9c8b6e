# pstrain_folder_library(NAME SOURCES src... DEPS lib...)
# A folder's static library linking DEPS publicly. While the folder has no
# sources yet it is an interface library carrying DEPS, so the tree configures.
function(pstrain_folder_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  if(ARG_SOURCES)
    add_library(${name} STATIC ${ARG_SOURCES})
    target_link_libraries(${name} PUBLIC ${ARG_DEPS} PRIVATE pstrain_warnings)
  else()
    add_library(${name} INTERFACE)
    target_link_libraries(${name} INTERFACE ${ARG_DEPS})
  endif()
endfunction()
