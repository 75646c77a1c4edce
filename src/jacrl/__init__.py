"""jacrl: reinforcement learning for the Jac language against a verifiable reward."""

__version__ = "0.1.0"
