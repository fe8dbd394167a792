# Warnings and sanitizers applied to every target the project builds.
add_compile_options(-Wall -Wextra)
if(DTENSOR_SANITIZE)
  add_compile_options(-fsanitize=${DTENSOR_SANITIZE} -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${DTENSOR_SANITIZE})
endif()
