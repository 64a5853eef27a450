# The in-process A/B's schedule and figure (samples/cifar.py), on synthetic phase times.
find_program(MT_PYTHON3 python3)
if(MT_PYTHON3)
  add_test(NAME test_ab_order COMMAND ${MT_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/py/test_ab_order.py)
endif()
