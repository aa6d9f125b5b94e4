# CTest (3.25) shows a skipped test (SKIP_RETURN_CODE 77) as "Skipped" and
# nothing more, not even with --output-on-failure, so why it skipped (no GPU,
# no NVRTC, a CPU lacking a target's features) would stay in the log file.
# After the tests ctest runs the build tree's CTEST_CUSTOM_POST_TEST:
# skip_reasons.sh prints there the "SKIP: reason" line of every test whose
# output has one (a test that exits 77 prints that line first).  CTest splits
# the command at spaces, so neither path may contain one.
file(WRITE ${CMAKE_BINARY_DIR}/CTestCustom.cmake
     "set(CTEST_CUSTOM_POST_TEST \"bash ${CMAKE_CURRENT_LIST_DIR}/skip_reasons.sh ${CMAKE_BINARY_DIR}\")\n")
