from fcctl.cli import main

main()
