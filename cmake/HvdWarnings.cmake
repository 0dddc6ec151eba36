# Strict warnings for hvdrun's own targets only (third-party headers come in as SYSTEM includes).
function(hvd_strict_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Werror -Wshadow -Wnon-virtual-dtor)
endfunction()
