// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;

import {ERC20} from "@openzeppelin/contracts/token/ERC20/ERC20.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";

/// A receive address that refuses every payment: value sent to it reverts.
contract Refuser {
    receive() external payable {
        revert("refused");
    }
}

/// Pays on what it is sent, the way a smart wallet or a batch withdrawal does.
contract Forwarder {
    function forward(address payable to) public payable {
        (bool ok,) = to.call{value: msg.value}("");
        require(ok, "forward failed");
    }

    function split(address payable[] calldata to, uint256[] calldata amounts) external payable {
        for (uint256 i = 0; i < to.length; i++) {
            (bool ok,) = to[i].call{value: amounts[i]}("");
            require(ok, "split failed");
        }
    }

    /// Sends, then reverts the whole transaction.
    function forwardThenRevert(address payable to) public payable {
        forward(to);
        revert("changed my mind");
    }

    /// The transaction succeeds, but the frame that sent reverted (and the value stays here).
    function forwardInRevertedFrame(address payable to) external payable {
        try this.forwardThenRevert{value: msg.value}(to) {} catch {}
    }
}

/// An ERC20 with the decimals it is given; the deployer holds the supply.
contract TestToken is ERC20 {
    uint8 private immutable places;

    constructor(string memory name, string memory symbol, uint8 decimals_) ERC20(name, symbol) {
        places = decimals_;
        _mint(msg.sender, 10 ** 30);
    }

    function decimals() public view override returns (uint8) {
        return places;
    }
}

/// Holds tokens; pays some and then reverts.
contract TokenPayer {
    function payThenRevert(IERC20 token, address to, uint256 amount) external {
        require(token.transfer(to, amount), "transfer failed");
        revert("changed my mind");
    }
}
