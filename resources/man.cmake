# Writes syncopate.1 and syncopate-cli.1 into OUT_DIR (run by the build, see CMakeLists.txt):
# the app's options from its own --help, everything else from `syncopate-cli man`.
execute_process(COMMAND ${CMAKE_COMMAND} -E env QT_QPA_PLATFORM=offscreen ${APP} --help
    OUTPUT_FILE ${OUT_DIR}/syncopate-help.txt COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND ${CLI} man app ${OUT_DIR}/syncopate-help.txt
    OUTPUT_FILE ${OUT_DIR}/syncopate.1 COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND ${CLI} man cli
    OUTPUT_FILE ${OUT_DIR}/syncopate-cli.1 COMMAND_ERROR_IS_FATAL ANY)
