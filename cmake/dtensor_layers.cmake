# The layers of docs/design.md §3 as build rules (docs/architecture.md, "How the
# build enforces the layers").
#
# Every layer is an OBJECT library (dtensor_core, dtensor_placement, dtensor_ops,
# dtensor_backend_*) whose objects are linked into the one libdtensor.so. A layer
# compiles against "header views" only: directories in the build tree that hold
# symbolic links to the header folders the layer may include, e.g.
#   <build>/header-views/ops_api/dtensor/ops -> <source>/include/dtensor/ops
# Neither the repository root nor include/ is on a layer's include path, so an
# include the layering forbids ("backends/gloo/..." in ops/, "dtensor/placement/..."
# in core/) is "file not found", a compile error. tests/layering proves it.

# dtensor_header_view(NAME LINK=SOURCE_PATH...) defines the INTERFACE target
# dtensor_view_NAME whose include directory is a view holding each LINK (a path
# inside the view) pointing at SOURCE_PATH (relative to the source tree).
function(dtensor_header_view name)
  set(_dir ${PROJECT_BINARY_DIR}/header-views/${name})
  foreach(_entry IN LISTS ARGN)
    string(REPLACE "=" ";" _pair "${_entry}")
    list(GET _pair 0 _link)
    list(GET _pair 1 _source)
    get_filename_component(_parent ${_dir}/${_link} DIRECTORY)
    file(MAKE_DIRECTORY ${_parent})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${_source} ${_dir}/${_link} SYMBOLIC)
  endforeach()
  add_library(dtensor_view_${name} INTERFACE)
  target_include_directories(dtensor_view_${name} INTERFACE ${_dir})
endfunction()

# Public headers, per layer: what a layer and the layers above it may include.
dtensor_header_view(core_api dtensor/core=include/dtensor/core dtensor/cuda.h=include/dtensor/cuda.h)
dtensor_header_view(placement_api dtensor/placement=include/dtensor/placement)
dtensor_header_view(ops_api dtensor/ops=include/dtensor/ops)
dtensor_header_view(nn_api dtensor/nn=include/dtensor/nn)
dtensor_header_view(checkpoint_api dtensor/checkpoint=include/dtensor/checkpoint)
dtensor_header_view(data_api dtensor/data=include/dtensor/data)
# Internal headers: a layer's own. core/detail also declares the interfaces a
# backend implements (DeviceOps, the device-module entry points), so backends see it.
dtensor_header_view(core_internal core=core)
dtensor_header_view(placement_internal placement=placement)
dtensor_header_view(ops_internal ops=ops)
dtensor_header_view(nn_internal nn=nn)
dtensor_header_view(checkpoint_internal checkpoint=checkpoint)
dtensor_header_view(data_internal data=data)

# dtensor_backend(NAME SOURCES... [USES core|ops]) defines the OBJECT library
# dtensor_backend_NAME for backends/NAME: it sees its own folder, core's
# interfaces and, with USES ops, the ops layer (operator and kernel registries).
function(dtensor_backend name)
  cmake_parse_arguments(PARSE_ARGV 1 _b "" "USES" "SOURCES")
  dtensor_header_view(backend_${name} backends/${name}=backends/${name})
  add_library(dtensor_backend_${name} OBJECT ${_b_SOURCES})
  target_link_libraries(dtensor_backend_${name} PRIVATE dtensor_view_backend_${name}
                        dtensor_view_core_internal)
  if(_b_USES STREQUAL "ops")
    target_link_libraries(dtensor_backend_${name} PUBLIC dtensor_ops)
  else()
    target_link_libraries(dtensor_backend_${name} PUBLIC dtensor_core)
  endif()
endfunction()
