# Every dependency comes from Debian's packages (scripts/install-deps.sh).
find_package(Threads REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(Eigen3 REQUIRED NO_MODULE)
find_package(Gloo REQUIRED)
find_package(dnnl REQUIRED)
find_package(OpenMP REQUIRED)
# Checkpoints: block checksums (zlib's CRC-32) and the JSON index.
find_package(ZLIB REQUIRED)
find_package(nlohmann_json 3 CONFIG REQUIRED)
# The rendezvous stores: hiredis (the Redis client; found as a library, not
# through pkg-config, whose -I/usr/include/hiredis would shadow headers) and
# libcrypto (HMAC-SHA256 of the job token).
find_library(DTENSOR_HIREDIS_LIBRARY hiredis REQUIRED)
find_package(OpenSSL REQUIRED COMPONENTS Crypto)
if(DTENSOR_BUILD_TESTS)
  find_package(Catch2 2.13 REQUIRED)
else()
  # dtensor::testing (testing/) is built and installed whenever Catch2 is there.
  find_package(Catch2 2.13 QUIET)
endif()
