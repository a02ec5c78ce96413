"""Pictures of gymnasium environments for test mode's videos, shared by every family that
draws through gymnasium (environments/mujoco.py's tasks, environments/gym_env.py's "gym:"
levels): the headless OpenGL and SDL set-up of an environment process, and the checked
rgb_array picture.

    prepare_headless_rendering()          # in an environment process, before gymnasium.make
    frame = render_rgb(env, level_name)   # uint8 [H, W, 3], or base.CannotRender saying why
    fps = render_fps_of(env)              # the environment's own steps per second, or None

No TensorFlow here: this runs in environment processes.
"""
import contextlib
import ctypes.util
import multiprocessing
import os
import sys
import warnings

import numpy as np

from scalable_agent_tf2.environments import base

# MuJoCo's OpenGL backends for a machine without a display (MuJoCo's MUJOCO_GL variable):
# OSMesa draws on the CPU (libOSMesa); EGL needs a GPU driver's EGL.
HEADLESS_GL_BACKENDS = ("osmesa", "egl")
CANNOT_RENDER_ADVICE = (
    "MuJoCo draws with OpenGL: on a machine without a display set MUJOCO_GL=egl (with a GPU) "
    "or MUJOCO_GL=osmesa (on the CPU; e.g. apt-get install libosmesa6) before starting.")


@contextlib.contextmanager
def pygame_notice_silenced():
  """Within the block, pygame's import warns no more that setuptools' pkg_resources is
  deprecated (pygame 2.6's pkgdata.py imports it): gymnasium's Box2D environments (CarRacing)
  and MiniGrid import pygame when their module loads, so every such command began with the
  notice, which is pygame's to fix and asks nothing of a user (requirements-runtime.txt pins
  pygame 2.6.1). Only that warning, only from pygame's modules."""
  with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=r"pkg_resources is deprecated",
                            category=UserWarning, module=r"pygame(\.|$)")
    yield


def prepare_headless_rendering(environ=None, has_library=ctypes.util.find_library,
                               modules=None, in_environment_process=None):
  """In an environment process on a machine without a display: MuJoCo's OpenGL backend, if
  MUJOCO_GL is not set, is OSMesa where its library is installed, else EGL (MuJoCo's default,
  GLFW, needs a display; MuJoCo reads MUJOCO_GL when it is first imported, so this runs
  before: gymnasium.make of a MuJoCo task imports it); and pygame (gymnasium's
  classic-control and Box2D pictures) draws with SDL's off-screen driver instead of
  complaining that there is no display. Only drawing (render()) uses either.

  Never in the process that runs TensorFlow, nor in one that will (the main process, before
  TensorFlow is imported): with MUJOCO_GL=osmesa a process that imports TensorFlow aborts
  at MuJoCo's first steps, drawing or not (measured: SIGABRT stepping Hopper-v5). Test mode
  records such environments in processes of their own (evaluation_episodes.py).

  Returns:
    The MuJoCo backend set, or None when nothing was set.
  """
  environ = os.environ if environ is None else environ
  modules = sys.modules if modules is None else modules
  if in_environment_process is None:
    in_environment_process = multiprocessing.parent_process() is not None
  if (not in_environment_process or "tensorflow" in modules or environ.get("DISPLAY")
      or environ.get("WAYLAND_DISPLAY")):
    return None
  environ.setdefault("SDL_VIDEODRIVER", "dummy")
  if environ.get("MUJOCO_GL") or "mujoco" in modules:
    return None
  backend = HEADLESS_GL_BACKENDS[0] if has_library("OSMesa") else HEADLESS_GL_BACKENDS[1]
  environ["MUJOCO_GL"] = backend
  return backend


def render_rgb(env, level_name):
  """gymnasium `env`'s rgb_array picture, uint8 [H, W, 3]; base.CannotRender saying why not
  (no rgb_array mode, its renderer's error, a picture of another shape). An environment made
  without a render mode is switched to rgb_array at the first call: gymnasium's environments
  read render_mode when they draw (MuJoCo's renderer makes its OpenGL context then), so
  training, which never draws, makes its environments as it always did."""
  modes = (env.metadata or {}).get("render_modes") or ()
  if env.render_mode is None and "rgb_array" in modes:
    env.unwrapped.render_mode = "rgb_array"
  mode = env.render_mode
  if mode != "rgb_array":
    raise base.CannotRender(f"{level_name}: its render mode is {mode!r} and its render modes "
                            f"{list(modes)}; videos need 'rgb_array'.")
  try:
    frame = env.render()
  except Exception as error:  # pylint: disable=broad-except
    advice = (" " + CANNOT_RENDER_ADVICE) if "mujoco" in sys.modules else ""
    raise base.CannotRender(f"{level_name}: its render() raised {type(error).__name__}: "
                            f"{error}.{advice}") from None
  frame = np.asarray(frame) if frame is not None else None
  if frame is None or frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[-1] != 3:
    raise base.CannotRender(
        f"{level_name}: its render() returned "
        f"{'None' if frame is None else f'{frame.dtype} of shape {frame.shape}'}, not an RGB "
        "picture (uint8 [H, W, 3]).")
  return frame


def render_fps_of(env):
  """Agent steps per second of the task's own time: gymnasium's metadata render_fps (1 / dt
  for the MuJoCo tasks: Hopper 125, HalfCheetah 20, Humanoid 67); None when it has none."""
  fps = (env.metadata or {}).get("render_fps")
  return float(fps) if fps else None
