"""MindSpore's ``mindspore.ops.operations.custom_ops`` module path: ``Custom``, ``CustomRegOp``,
``DataType`` and ``custom_info_register`` (also under its older name ``custom_op_info_register``)."""
from ..custom import Custom
from ..reginfo import CustomRegOp, DataType, custom_info_register

custom_op_info_register = custom_info_register

__all__ = ["Custom", "CustomRegOp", "DataType", "custom_info_register", "custom_op_info_register"]
