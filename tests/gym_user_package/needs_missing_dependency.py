"""A user's module that imports a package which is not installed: its own error (naming that
package) must reach the user, not one about the module itself."""
import a_dependency_that_is_not_installed  # noqa: F401 (the import is what fails)
